"""Every config in configs/ loads and validates; sync_exact, moe and disaggregated train end to end.

The runs are the configs themselves with the sizes of configs/smoke.py and 2 RL steps (what makes
each config what it is, scheduling mode, filter, placement, experts, stays as configured);
disaggregated trains 4 steps on the virtual clock (two syncs after the start's, versions a
function of the seed).
"""

import glob
import importlib
import json
import os

import numpy as np
import pytest

from agentjax.diagnostics.tbevents import WALL_CLOCK
from agentjax.learner.journal import Journal
from agentjax.policy.config import ConfigError
from agentjax.run import config as runconfig
from agentjax.run import learner as runlearner
from agentjax.run import loop

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_CONFIGS = (
    "default",
    "smoke",
    "sync_exact",
    "disaggregated",
    "moe",
    "codefix_eval",
    "bf16_sampler_icepop",
    "offpolicy_hispo",
    "decoupled_ppo",
    "moe_r3",
    "noisy_env_curriculum",
)
OTHER_CONFIGS = {"compile_check": "launch/compile_check.py", "consistency": "launch/consistency.py"}
# model.hf_path: tests/codefix_training_cases.py; codefix_generated: tests/envs/test_codefix_generator.py
HF_CONFIGS = ("codefix_tiny", "qwen3_codefix", "codefix_generated", "codefix_learn")


def _load(name):
    return importlib.import_module(f"configs.{name}").get_config()


def test_every_config_is_classified_and_loads():
    paths = glob.glob(os.path.join(ROOT, "configs", "*.py"))
    names = {os.path.basename(p)[:-3] for p in paths} - {"__init__"}
    assert names == set(RUN_CONFIGS) | set(OTHER_CONFIGS) | set(HF_CONFIGS), "classify new configs here"
    for name in OTHER_CONFIGS:  # configs of other launchers (their own tests check them)
        assert len(_load(name)) > 0


@pytest.mark.parametrize("name", [n for n in RUN_CONFIGS if n != "codefix_eval"])
def test_run_configs_parse(name):
    run = runconfig.parse(_load(name))
    assert run.task.name == "minirepo"
    if name == "sync_exact":
        assert run.scheduler.mode == "sync" and run.admission.max_version_gap == 0
        assert run.loss.filter == "none" and run.model.exact_tile > 0
    if name == "moe":
        assert run.model.n_experts > run.model.n_experts_per_token >= 1
    if name == "disaggregated":
        p = run.placement
        assert p.kind == "disaggregated" and p.sync_every > 1
        n_l, n_s = (int(np.prod([v for v in m.values() if v])) for m in (p.learner_mesh, p.sampler_mesh))
        assert n_l + n_s <= 8  # disjoint sub-meshes of the 8 (fake) devices


def test_codefix_eval_config_is_for_evaluation_only():
    run = runconfig.parse(_load("codefix_eval"), evaluation=True)
    assert run.task.name == "codefix" and "oracle" in run.codefix.agents and len(run.codefix.agents) == 21
    with pytest.raises(ConfigError, match="task.name='codefix' needs a real tokenizer for training"):
        runconfig.parse(_load("codefix_eval"))


def _tiny(name, **extra):
    c = _load(name)
    c.model.update(
        d_model=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, d_ff=64 if name != "moe" else 32
    )
    c.task.eval_tasks = 8
    c.warm_start.update(episodes=16, steps=2, batch_size=8)
    c.rl.update(steps=2, group_size=4, batch_size=8, eval_every=2)
    # each config's own clock (the default's real time) on a slot engine of smoke size
    c.scheduler.update(num_slots=16, window=8, engine_slots=8)
    c.checkpoint_every = 2
    c.log_every = 1
    c.report = False
    for k, v in extra.items():
        c[k] = v
    return c


def _train(name, workdir, clock=None, steps=2, **kw):
    c = _tiny(name)
    c.rl.steps = steps
    if clock is not None:
        c.scheduler.clock = clock
    summary = loop.train(c, str(workdir), log=lambda s: None, **kw)
    rows = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl")) if ln.strip()]
    for r in rows:
        for k in WALL_CLOCK:
            r.pop(k, None)
    return summary, rows


def _train_rows(rows):
    return [r for r in rows if "loss/total" in r]


@pytest.mark.slow
def test_sync_exact_trains_deterministically_with_ratio_exactly_one(tmp_path):
    summary, rows = _train("sync_exact", tmp_path / "a", clock="virtual")  # same seed, same run
    train = _train_rows(rows)
    assert [r["step"] for r in train] == [1, 2]
    for r in train:  # on-policy and exact: the learner reproduces the sampler's log-probs bitwise
        assert r["version_gap_max"] == 0
        assert r["loss/ratio/mean"] == 1.0 and r["loss/ratio/max"] == 1.0
        assert not any(k.startswith("masked/filter_") and v for k, v in r.items())
    assert summary["final_eval"]["eval/n"] == 8 and summary["weight_sync"]["syncs"] == 0
    again, rows2 = _train("sync_exact", tmp_path / "b", clock="virtual")
    assert rows2 == rows and again["params_sha256"] == summary["params_sha256"]


@pytest.mark.slow
def test_moe_records_routes_and_the_learner_replays_them(tmp_path, monkeypatch):
    seen = []
    make_batch = runlearner.make_batch

    def spy(*a, **k):
        arrays, bm = make_batch(*a, **k)
        seen.append(None if "routes" not in arrays else np.asarray(arrays["routes"]).shape)
        return arrays, bm

    monkeypatch.setattr(runlearner, "make_batch", spy)
    cfg = _load("moe")
    summary, rows = _train("moe", tmp_path)
    layers, k = 1, cfg.model.n_experts_per_token
    assert len(seen) == 2 and all(s is not None and s[2:] == (layers, k) for s in seen), seen
    trajs = Journal(tmp_path / "journal.bin").read()
    turns = [turn for t in trajs for turn in t.turns]
    assert turns and all(u.routes is not None and u.routes.shape[1:] == (layers, k) for u in turns)
    assert all(0 <= int(u.routes.min()) and int(u.routes.max()) < cfg.model.n_experts for u in turns)
    first = _train_rows(rows)[0]  # sampled and learned at version 0: exact, routes replayed
    assert first["loss/ratio/mean"] == 1.0 and first["loss/ratio/max"] == 1.0
    assert summary["final_eval"]["eval/n"] == 8


@pytest.mark.slow
def test_disaggregated_syncs_every_k_steps_onto_the_sampler_mesh(tmp_path):
    """sync_every=2: the sampler samples with weights of even versions only, and its tokens
    record those versions, not the scheduler's newer one."""
    # the virtual clock: which versions a round samples with is a function of the seed
    summary, rows = _train("disaggregated", tmp_path, clock="virtual", steps=4)
    assert [r["step"] for r in _train_rows(rows)] == [1, 2, 3, 4]
    ws = summary["weight_sync"]
    assert ws["syncs"] == 3 and ws["skipped"] == 2 and ws["bytes"] > 0  # initial, steps 2 and 4
    versions = {int(v) for t in Journal(tmp_path / "journal.bin").read() for v in t.versions}
    assert all(v % 2 == 0 for v in versions) and max(versions) >= 2, versions  # synced weights only
