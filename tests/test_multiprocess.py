"""Two processes on localhost with jax.distributed (CPU collectives) train the default path and
agree on the parameters (a data-parallel train step over both processes' devices)."""

import json
import os
import socket
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_agree_on_parameters(tmp_path):
    port = _free_port()
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONUNBUFFERED": "1",
        "JAX_COMPILATION_CACHE_DIR": os.path.join(ROOT, ".jax_cache"),
    }
    env.pop("XLA_FLAGS", None)
    procs = []
    for pid in range(2):
        cmd = [
            sys.executable,
            "-m",
            "launch.train",
            "--config=configs/smoke.py",
            f"--workdir={tmp_path}/p{pid}",
            "--config.report=False",
            "--config.checkpoint_every=0",
            "--config.rl.steps=3",
            "--config.placement.learner_mesh.data=2",
            f"--coordinator_address=127.0.0.1:{port}",
            "--num_processes=2",
            f"--process_id={pid}",
        ]
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    for p, out in zip(procs, outs, strict=True):
        assert p.returncode == 0, out[-4000:]
    summaries = [json.load(open(tmp_path / f"p{i}" / "summary.json")) for i in range(2)]
    assert [s["process_count"] for s in summaries] == [2, 2]
    assert summaries[0]["params_sha256"] == summaries[1]["params_sha256"]
    for out in outs:
        assert "step    3 |" in out
