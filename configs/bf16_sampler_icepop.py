"""A bf16 sampler (bf16 compute and LM head) with an f32 learner, and IcePop on the mismatch.

The sampler's log-probs now differ from the learner's at the same parameters (the "bf16
sampler+head / f32 learner" row of docs/consistency.md). IcePop compares the sampler with the
learner's recompute at each token's behaviour version (``loss.filter_ratio="mismatch"``: kept
parameter versions, agentjax/learner/versions.py), so it masks mismatch only, never staleness;
``ratio/mismatch`` and ``masked/filter_icepop`` in metrics.jsonl show what it did.

    python -m launch.train --config=configs/bf16_sampler_icepop.py --workdir=workdir/bf16
"""

from configs import default


def get_config():
    c = default.base()
    c.model.exact_tile = 0  # fast kernels on both sides (exactness is moot across precisions)
    c.sampler.update(compute_dtype="bfloat16", head_dtype="bfloat16")
    c.loss.update(filter="icepop", filter_ratio="mismatch", icepop_low=0.5, icepop_high=2.0)
    return c
