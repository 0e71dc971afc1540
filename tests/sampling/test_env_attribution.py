"""Who an environment's exception is charged to (docs/reliability.md, issue #31): an exception the
agent's action provoked is ``agent_error`` with the exception as evidence; only an exception that
carries infrastructure evidence (:class:`InfraError`: the sandbox, the host, an injected fault) is
``infra_fault``. Before, every exception of ``step`` was masked as ``infra_fault``, so an agent
escaped its reward by crashing its environment."""

import jax
import pytest

from agentjax.envs import minirepo
from agentjax.envs.protocol import MAX_ERROR_CHARS, InfraError, Label, attribute_step_error
from agentjax.envs.sandbox import SandboxUnavailable
from agentjax.policy import init_params
from agentjax.policy.codec import Codec
from agentjax.policy.tokenizer import WordTokenizer
from agentjax.run import loopparts as loopparts
from agentjax.sampling.engine_rollout import _pool_error
from agentjax.sampling.episode import EpisodeSpec
from agentjax.sampling.queue import Caps
from agentjax.sampling.rollout import Rollout
from agentjax.sampling.sampler import Sampler
from agentjax.testing.models import tiny_dense
from agentjax.trajectory import StopReason

TOK = WordTokenizer(minirepo.vocabulary())
CFG = tiny_dense(vocab_size=TOK.vocab_size, max_seq_len=96, exact_tile=8)
CAPS = Caps(max_tool_calls=4, max_action_tokens=4, max_obs_tokens=24)


class ChokesOnInput(minirepo.MinirepoEnv):
    """Raises on what the agent sent: a malformed input, a path or size it cannot handle."""

    def step(self, action_text):
        raise ValueError(f"cannot handle {action_text!r}" + "x" * 10_000)


class HostDies(minirepo.MinirepoEnv):
    """Fails for the host's reason, and says so with evidence."""

    def step(self, action_text):
        raise InfraError("sandbox process killed by the host", {"host": "oom_killer"})


def _episodes(env_cls, n=3):
    specs = [
        EpisodeSpec(env_cls(), minirepo.generate(i, "train"), i, task_id=f"t{i}", submit_index=i)
        for i in range(n)
    ]
    params = init_params(CFG, jax.random.key(0))
    r = Rollout(Sampler(CFG, stop_tokens=(TOK.eos_id,)), Codec(TOK), CAPS, specs)
    r.start(params, version=0)
    return specs, r.advance(params, 0, jax.random.key(1))


def test_an_exception_on_the_agents_input_is_the_agents_error():
    specs, trajs = _episodes(ChokesOnInput)
    assert len(trajs) == 3
    for spec, t in zip(specs, sorted(trajs, key=lambda t: t.task_id), strict=True):
        assert t.stop_reason == StopReason.AGENT_ERROR and t.label == "agent_error"
        assert t.final_reward == 0.0  # trained on, not masked
        ev = t.reward_evidence
        assert "ValueError" in ev["env_error"] and ev["attribution"].startswith("agent_input")
        assert len(ev["env_error"]) < MAX_ERROR_CHARS + 100  # the agent's input is bounded
        assert t.env_fingerprint == spec.task.fingerprint  # never "" without a verdict


def test_a_host_failure_with_evidence_is_an_infra_fault():
    specs, trajs = _episodes(HostDies)
    for spec, t in zip(specs, sorted(trajs, key=lambda t: t.task_id), strict=True):
        assert t.stop_reason == StopReason.INFRA_FAULT and t.label == "infra_fault"
        assert t.final_reward is None  # masked, never a zero
        assert t.reward_evidence["host"] == "oom_killer"
        assert t.reward_evidence["attribution"].startswith("infra")
        assert t.env_fingerprint == spec.task.fingerprint


@pytest.mark.parametrize(
    "err, label",
    [
        (ValueError("bad path"), Label.AGENT_ERROR),
        (KeyError("no such file"), Label.AGENT_ERROR),
        (FileNotFoundError("/x/../../etc"), Label.AGENT_ERROR),  # an OSError on the agent's path
        (MemoryError(), Label.AGENT_ERROR),  # a huge argument
        (RecursionError(), Label.AGENT_ERROR),
        (TimeoutError("subprocess timed out"), Label.AGENT_ERROR),  # the agent's own loop
        (InfraError("host down"), Label.INFRA_FAULT),
        (SandboxUnavailable("bwrap missing"), Label.INFRA_FAULT),
        (loopparts.InjectedEnvCrash("injected env_crash", {"injected": "env_crash"}), Label.INFRA_FAULT),
        (_pool_error(RuntimeError("worker process died")), Label.INFRA_FAULT),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, BaseException) else x.value,
)
def test_the_attribution_rule(err, label):
    got, evidence = attribute_step_error(err)
    assert got is label and evidence["env_error"] and evidence["attribution"]


def test_the_injected_env_crash_stays_an_infra_fault():
    env = loopparts.NoisyEnv(minirepo.MinirepoEnv(), {"env_crash": 1.0})
    env.reset(minirepo.generate(0, "train"), 0)
    with pytest.raises(InfraError) as e:
        env.step("submit")
    assert attribute_step_error(e.value)[0] is Label.INFRA_FAULT


def test_group_mode_neither_drops_nor_keys_on_a_missing_fingerprint():
    """A record without a fingerprint (older records, simulated workers) is no evidence of another
    environment: it is not dropped, and it does not make its group drop every verdict."""
    from types import SimpleNamespace

    from agentjax.trajectory import Trajectory

    run = SimpleNamespace(fingerprints=SimpleNamespace(mode="group"))
    t = lambda fp: Trajectory("t0", "default", [], StopReason.FINISHED, env_fingerprint=fp)  # noqa: E731
    weights, m = loopparts.fingerprint_weights(run, [t(""), t("a"), t("a"), t("b")], [1.0] * 4)
    assert weights == [1.0, 1.0, 1.0, 0.0] and m["fingerprints/dropped"] == 1.0


class ResetFails(minirepo.MinirepoEnv):
    """The host fails before the agent acted (its workspace cannot be made)."""

    def reset(self, task, seed, **kw):
        raise OSError(28, "No space left on device", "/tmp/workspace")


def test_a_reset_that_raises_is_an_infra_fault_and_the_others_run_on():
    """No agent input reaches a reset, so whatever it raises is the host's: that episode is an
    ``infra_fault`` without turns and its batch-mates finish (before, the exception ended the run)."""
    specs = [
        EpisodeSpec(cls(), minirepo.generate(i, "train"), i, task_id=f"t{i}", submit_index=i)
        for i, cls in enumerate([minirepo.MinirepoEnv, ResetFails, minirepo.MinirepoEnv])
    ]
    params = init_params(CFG, jax.random.key(0))
    r = Rollout(Sampler(CFG, stop_tokens=(TOK.eos_id,)), Codec(TOK), CAPS, specs)
    r.start(params, version=0)
    trajs = {t.task_id: t for t in r.advance(params, 0, jax.random.key(1))}
    assert len(trajs) == 3
    bad = trajs["t1"]
    assert bad.stop_reason == StopReason.INFRA_FAULT and bad.final_reward is None and not bad.turns
    assert "No space left" in bad.reward_evidence["env_error"]
    assert bad.env_fingerprint == specs[1].task.fingerprint
    assert all(trajs[k].turns and trajs[k].stop_reason != StopReason.INFRA_FAULT for k in ("t0", "t2"))


def test_the_slot_engine_attributes_like_rollout():
    """EngineRollout (environment steps on a pool) books each failure as Rollout does."""
    from agentjax.sampling.engine import Engine
    from agentjax.sampling.engine_rollout import EngineRollout
    from agentjax.sampling.envpool import EnvPool

    envs = [ChokesOnInput, HostDies, ResetFails, minirepo.MinirepoEnv]
    specs = [
        EpisodeSpec(cls(), minirepo.generate(i, "train"), i, task_id=f"t{i}", submit_index=i)
        for i, cls in enumerate(envs)
    ]
    params = init_params(CFG, jax.random.key(0))
    r = EngineRollout(
        Engine(Sampler(CFG, stop_tokens=(TOK.eos_id,)), slots=2, chunk=4), Codec(TOK), CAPS, specs
    )
    with EnvPool(2, "thread") as pool:
        got = {t.task_id: t for t in r.run(params, 0, jax.random.key(1), pool)}
    assert [got[f"t{i}"].stop_reason for i in range(3)] == [
        StopReason.AGENT_ERROR,
        StopReason.INFRA_FAULT,
        StopReason.INFRA_FAULT,
    ]
    assert got["t0"].final_reward == 0.0 and got["t1"].final_reward is None and got["t2"].final_reward is None
    assert got["t3"].turns and all(
        t.env_fingerprint == s.task.fingerprint for t, s in zip(got.values(), specs, strict=True)
    )
