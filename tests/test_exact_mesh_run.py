"""A run in exact mode with the Pallas kernels on a multi-device mesh: the composed learner step
and sampler trace every kernel inside their mesh (on a TPU, Mosaic cannot partition a kernel
traced off it, so an unwired run fails there; on the CPU it would run the kernels unpartitioned
and this test is what notices)."""

import jax
import jax.numpy as jnp
import numpy as np

from tests.runs import tiny_config


def test_an_exact_pallas_run_traces_its_kernels_on_its_meshes(monkeypatch):
    from agentjax.learner.step import init_train_state
    from agentjax.policy import pallas_kernels as P
    from agentjax.run import config as runconfig
    from agentjax.run import loop
    from agentjax.run.build import build, compose, learner_rows
    from agentjax.sharding import multihost

    mesh = {"data": 2, "fsdp": 2}
    cfg = tiny_config("sync_exact", model__exact_kernels="pallas", placement__learner_mesh=mesh)
    parts = build(runconfig.parse(cfg))
    assert parts.model.invariant == "pallas"
    c = compose(parts)
    mesh = c.placement.learner_mesh
    assert mesh.size == 4
    seen = []
    where = P.current_mesh
    monkeypatch.setattr(P, "current_mesh", lambda: seen.append(where()) or seen[-1])

    params = loop._initial_params(parts, c.placement)  # on the learner mesh's shardings
    rows, t = learner_rows(parts.run), 12
    rng = np.random.default_rng(0)
    f = lambda *shape: np.zeros(shape, np.float32)
    batch = {
        "tokens": rng.integers(1, parts.model.vocab_size, (rows, t)).astype(np.int32),
        "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (rows, t)).copy(),
        "loss_mask": np.ones((rows, t), np.float32),
        "behav_logp": f(rows, t),
        "step_reward": f(rows, t),
        "advantages": rng.standard_normal(rows).astype(np.float32),
        "weight": np.ones(rows, np.float32),
        "bootstrap": f(rows),
        "lengths": np.full(rows, t, np.int32),
    }
    state = init_train_state(params, c.learner.tx, 0)
    _, metrics = c.learner.train_step(state, multihost.shard_batch(batch, mesh))
    assert float(metrics["skipped_nonfinite"]) == 0.0
    n_learner = len(seen)
    assert n_learner and all(ctx is not None and ctx[0] is mesh for ctx in seen)

    s = c.sampler
    prompts = jnp.asarray(rng.integers(1, parts.model.vocab_size, (4, 5)), jnp.int32)
    st = s.extend(params, s.init(4), prompts, jnp.asarray([5, 3, 4, 2], jnp.int32), version=0)
    s.generate(params, st, jax.random.key(1), max_new_tokens=2, version=0)
    assert len(seen) > n_learner and all(ctx is not None for ctx in seen)  # no kernel off the mesh
