"""Exact-consistency synchronous baseline: the default run with a batch barrier and no filter.

``scheduler.mode='sync'`` (every trajectory of a batch is sampled with the weights the learner is
about to update: version gap 0), exact kernels (``model.exact_tile=8``, float32), so the learner's
log-probs equal the sampler's bitwise and the importance ratio is exactly 1: no consistency
filter (``loss.filter='none'``) and no staleness budget (``max_version_gap=0``). The reference the
asynchronous configs are compared against: same model, task, objective and seed.

    python -m launch.train --config=configs/sync_exact.py --workdir=workdir/sync_exact
"""

from configs import default


def get_config():
    c = default.base()
    c.model.update(exact_tile=8, param_dtype="float32", compute_dtype="float32", head_dtype="float32")
    c.scheduler.update(mode="sync")
    c.admission.max_version_gap = 0
    c.loss.update(filter="none")
    return c
