"""Off-policy HisPO: asynchronous sampling up to 4 versions stale, a bf16 sampler, and HisPO's
separate masks on the update (staleness) ratio pi / pi_v and the mismatch ratio pi_v / mu.

pi_v is the learner's recompute with the kept parameters of each token's behaviour version, so
the two ratios really are separate (``ratio/staleness`` and ``ratio/mismatch`` in the metrics;
``loss/masked/token_staleness`` and ``loss/masked/token_mismatch`` are what HisPO rejected).

    python -m launch.train --config=configs/offpolicy_hispo.py --workdir=workdir/hispo
"""

from configs import default


def get_config():
    c = default.base()
    c.model.exact_tile = 0
    c.scheduler.update(mode="async")
    c.admission.max_version_gap = 4
    c.sampler.update(compute_dtype="bfloat16", head_dtype="bfloat16")
    c.loss.update(name="hispo", filter="none", filter_ratio="mismatch")
    # HisPO's own bounds and clip: the registry's values (agentjax/objectives/registry.py)
    return c
