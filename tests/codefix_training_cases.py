"""codefix trained from a HF directory in the real sandbox, then exported back to transformers.

tiny HF dir (launch/make_tiny_hf.py: random Qwen3 + BPE trained on codefix) -> configs/codefix_tiny.py
through system.train (warm start on honest demonstrations, 2 GRPO steps on sandbox verdicts,
checkpoints, report) -> launch.export -> transformers logits within 1e-5 of ours; export -> import
is bitwise.
"""

import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

from agentjax import report
from agentjax.learner.journal import Journal
from agentjax.policy import forward
from agentjax.policy.hf import load_hf_checkpoint
from agentjax.run import loop
from configs import codefix_tiny
from launch import export as export_cli

pytestmark = pytest.mark.slow


def _sandbox_ok():
    from agentjax.envs import sandbox

    return sandbox.probe().ok


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_hf_dir):
    if not _sandbox_ok():
        pytest.skip("codefix needs the sandbox (root, bwrap, setpriv)")
    c = codefix_tiny.get_config()
    c.model.update(hf_path=str(tiny_hf_dir), max_seq_len=1536)
    # plain: a random model's reply is handed to the environment as text, so every episode ends in
    # the isolated verifier (at task.max_steps) and gets a real sandbox verdict; the Hermes path
    # (malformed calls -> agent_error) is the config's default and tested in tests/policy.
    c.model.tool_format = "plain"
    c.task.update(max_steps=2, eval_tasks=1)
    c.codefix.update(tasks=("clamp", "leap", "median"), agents=("no_op", "oracle"))
    c.caps = dict(max_tool_calls=3, max_action_tokens=24, max_obs_tokens=768)
    c.warm_start.update(episodes=8, steps=8, batch_size=4)  # enough steps for the NLL to fall
    c.rl.update(steps=2, group_size=2, batch_size=4, eval_every=2)
    c.scheduler.update(num_slots=4, window=4)
    c.checkpoint_every = 2
    wd = str(tmp_path_factory.mktemp("codefix_run"))
    summary = loop.train(c, wd, log=lambda s: None)
    return wd, summary, c


def test_codefix_run_has_sandbox_verdicts_updates_checkpoints_and_report(trained):
    wd, summary, _ = trained
    trajs = Journal(os.path.join(wd, "journal.bin")).read()
    assert len(trajs) >= 4
    judged = [t for t in trajs if t.verifier_version]
    assert judged, "no trajectory reached the isolated verifier"
    assert {t.label for t in judged} <= {"pass", "fail", "reward_hack", "infra_fault"}
    assert all(t.env_fingerprint for t in judged)
    assert all(t.num_action_tokens > 0 for t in trajs)
    rows = [json.loads(x) for x in open(os.path.join(wd, "metrics.jsonl"))]
    header = rows[0]["header"]
    assert header["warm_start/nll_last"] < header["warm_start/nll_first"]
    assert 0.0 <= header["demonstrator_success"] <= 1.0  # honest agents on the held-out task
    steps = [r for r in rows if "loss/total" in r]
    assert [r["step"] for r in steps] == [1, 2] and all(sum(r["labels"].values()) == 4 for r in steps)
    assert os.path.isdir(os.path.join(wd, "checkpoints", "2"))
    assert summary["final_eval"]["eval/n"] == 1.0
    text = open(report.write_report(wd)).read()
    assert "| label | group | trained trajectories | share |" in text
    counted = sum(
        int(line.split("|")[3])
        for line in text.splitlines()
        if line.startswith("| ")
        and line.split("|")[2].strip() in ("pass", "fail", "hack", "agent", "infra", "other")
        and line.split("|")[3].strip().isdigit()
    )
    assert counted == 8


def test_export_loads_in_transformers_and_reimports_bitwise(trained, tiny_hf_dir, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    wd, _, c = trained
    out = export_cli.export(wd, str(tmp_path / "hf"))
    from agentjax.learner import checkpoint as ckpt

    trained_params = ckpt.restore_checkpoint(os.path.join(wd, "checkpoints")).state["params"]
    config, params = load_hf_checkpoint(out, max_seq_len=64)
    for a, b in zip(
        *(np.asarray(x) for x in (params["layers"]["wq"], trained_params["layers"]["wq"])), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    import jax

    jax.tree.map(
        lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, trained_params
    )
    _, initial = load_hf_checkpoint(tiny_hf_dir, max_seq_len=64)
    assert not np.array_equal(np.asarray(initial["embed"]), np.asarray(params["embed"]))  # trained
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    tokens = np.random.default_rng(0).integers(0, config.vocab_size, (2, 16))
    ours, _, _ = forward(
        params, jnp.asarray(tokens), jnp.broadcast_to(jnp.arange(16), (2, 16)), config=config
    )
    with torch.no_grad():
        ref = model(torch.tensor(tokens)).logits.numpy()
    assert np.max(np.abs(np.asarray(ours) - ref)) <= 1e-5
    hf_tok = transformers.AutoTokenizer.from_pretrained(out)
    assert hf_tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    ).endswith("<|im_start|>assistant\n")
    with pytest.raises(FileExistsError, match="already holds a checkpoint"):
        export_cli.export(wd, out)
    from agentjax.policy.hf import HFImportError

    with pytest.raises(HFImportError, match="was not trained from a HF directory"):
        export_cli.export(str(tmp_path), str(tmp_path / "x"))


def test_launch_eval_plays_the_codefix_checkpoint_from_its_workdir(trained):
    """launch.eval on a codefix run: its stored config, and a --config with --workdir named (e.g.
    another split), both evaluate the CHECKPOINT (before: the stored config's report broke the
    table, and a codefix --config silently evaluated the scripted agents instead)."""
    from agentjax.evaluation import run_eval, stored_config, table

    wd, summary, c = trained
    mine = run_eval(stored_config(wd), workdir=wd, sampled=False, stored=True)
    given = run_eval(c.to_dict(), workdir=wd, sampled=False, workdir_given=True)
    for r in (mine, given):
        assert r["kind"] == "checkpoint" and r["step"] == 2 and "agents" not in r
        assert "step 2 greedy" in table(r)
    assert mine["success"]["rate"] == summary["final_eval"]["eval/success"]
    scripted = run_eval(c.to_dict(), workdir=wd, agent="oracle", num_tasks=1)
    assert "agents" in scripted and "oracle" in table(scripted)
