"""Diagnostics: held-out evaluation (the training loop's and ``launch.eval``'s), the
sampler/learner consistency measurement, run metrics and the TensorBoard event writer."""

from agentjax.diagnostics.consistency import delta_report, measure, standard_modes
from agentjax.diagnostics.evaluate import evaluate

__all__ = ["delta_report", "evaluate", "measure", "standard_modes"]
