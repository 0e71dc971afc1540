"""agentjax: reinforcement learning for LLM agents in JAX.

What a notebook needs, at the top level (imported on first use, so ``import agentjax`` stays
light)::

    import agentjax
    from configs.default import get_config
    cfg = get_config()
    summary = agentjax.train(cfg, "/tmp/run")            # python -m launch.train
    report = agentjax.evaluate(cfg, workdir="/tmp/run")  # python -m launch.eval
    run = agentjax.parse_config(cfg)                     # the typed RunConfig, checked

The pieces live in the subpackages: ``policy`` (model, tokenizers, HF import), ``sampling``
(sampler, rollouts, the scheduler machine and its driver, executors), ``objectives`` (the
losses as pure functions), ``learner``, ``envs`` (the environment protocol, sandbox, faults),
``tasks`` (the task suites and the doors for your own), ``diagnostics`` and ``sharding``.
"""

from agentjax.importpath import lazy_exports

# name -> "module:attribute", resolved on first access
_EXPORTS = {
    "train": "agentjax.run.loop:train",
    "evaluate": "agentjax.evaluation:run_eval",
    "parse_config": "agentjax.run.config:parse",
    "RunConfig": "agentjax.run.config:RunConfig",
    "ConfigError": "agentjax.run.config:ConfigError",
    "ModelConfig": "agentjax.policy.config:ModelConfig",
    "SchedulerConfig": "agentjax.sampling.runlog:SchedulerConfig",
    "StalenessConfig": "agentjax.sampling.staleness:StalenessConfig",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
