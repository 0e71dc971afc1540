"""The package faces: what a notebook user imports (``agentjax.train``, ``agentjax.evaluate``,
the config types; the scheduler, its machine, the worker and the executors from ``sampling``;
``envs`` and ``diagnostics``), each the very object the system uses."""

import subprocess
import sys

import agentjax
from agentjax import diagnostics, envs, sampling


def test_the_top_level_names_are_the_systems_own_and_import_lazily():
    from agentjax import evaluation
    from agentjax.run import config as runconfig  # noqa: PLC0415
    from agentjax.run import loop  # noqa: PLC0415

    assert agentjax.train is loop.train and agentjax.evaluate is evaluation.run_eval
    assert agentjax.parse_config is runconfig.parse and agentjax.RunConfig is runconfig.RunConfig
    assert set(agentjax.__all__) >= {"train", "evaluate", "RunConfig", "SchedulerConfig", "StalenessConfig"}
    code = "import sys, agentjax; print('agentjax.run.loop' in sys.modules, 'jax' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]  # `import agentjax` pulls in nothing heavy


def test_sampling_envs_and_diagnostics_export_what_a_notebook_needs():
    from agentjax.sampling import machine, scheduler, worker  # noqa: PLC0415

    assert sampling.Scheduler is scheduler.Scheduler and sampling.machine is machine
    assert sampling.SamplerWorker is worker.SamplerWorker
    executors = ("SimulatedExecutor", "BatchingExecutor", "ThreadedExecutor", "RealtimeExecutor")
    executors += ("ReplayExecutor",)
    for name in executors:
        assert name in sampling.__all__ and hasattr(sampling, name)
    for face in (sampling, envs, diagnostics):
        assert face.__all__ and all(hasattr(face, n) for n in face.__all__)
    assert envs.Verdict and envs.Label.INFRA_FAULT and diagnostics.evaluate
