"""One training run, as a package with a linear flow (``launch/train.py`` calls :func:`train`):

* ``config``: the typed run config (``parse``), each section checked before any work
  (``sections``: the feature sections; ``checks``: type and range checks);
* ``build``: what a run is built from (``build``: task suite + policy; ``compose``: placement,
  samplers, the learner's parts, the rollout worker built whole);
* ``learner``: the learner as a value, ``learner_step(parts, state, train) -> (state, weights,
  metrics)``, pure;
* ``loop``: the training loop and the learner job (the effects of a step: weight sync, publish);
* ``clock``: what is clock-specific (virtual, real, replay), chosen once;
* ``files``: the workdir (metrics, journal, checkpoints, resume);
* ``summary``: the header, the progress line and ``summary.json``;
* ``loopparts``: the loop's pieces built from the feature sections (fault injection, retry
  policy, curriculum, rubric reward, fingerprint weights).

The names below are imported on first use, so ``import agentjax.run`` stays light.
"""

from agentjax.importpath import lazy_exports

_EXPORTS = {
    "train": "agentjax.run.loop:train",
    "parse": "agentjax.run.config:parse",
    "RunConfig": "agentjax.run.config:RunConfig",
    "ConfigError": "agentjax.run.config:ConfigError",
    "learner_step": "agentjax.run.learner:learner_step",
    "LearnerState": "agentjax.run.learner:LearnerState",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS, globals())
