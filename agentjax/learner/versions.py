"""The learner's kept parameter versions, for log-probs at the version that sampled a token.

Choice (issue #16): the learner *recomputes* ``log pi_v(token)`` with the kept parameters of each
behaviour version v, instead of having the sampler record it. The sampler runs at its own
precision (bf16, int8, other kernels): recording the learner engine's number there would mean
running the learner's model inside the sampler for every token. Recomputing costs one forward per
distinct version in the batch (at most ``slots``) and memory for ``slots`` parameter copies
(bounded by the staleness manager's version gap plus the weight-sync lag).

    kept = keep({}, 0, params0, oldest=0)
    behaviour = slots(kept, 3, fallback=params)   # -> (params_tuple, versions[3])
"""

from __future__ import annotations

import numpy as np


def slot_count(max_version_gap: int, sync_every: int) -> int:
    """Versions a batch can hold: the admitted gap ``0..max_version_gap`` plus the sampler's lag
    behind the learner when weights sync only every ``sync_every`` steps."""
    return max_version_gap + sync_every


def keep(kept: dict, version: int, params, *, oldest: int) -> dict:
    """``kept`` with ``params`` as ``version`` and every version older than ``oldest`` dropped."""
    out = {v: p for v, p in kept.items() if v >= oldest}
    out[version] = params
    return out


def slots(kept: dict, n: int, *, fallback):
    """A fixed-size ``(params_tuple, versions int32[n])`` (newest first; empty slots hold
    ``fallback`` with version -1, never matched), so the train step compiles once."""
    vs = sorted(kept, reverse=True)[:n]
    params = tuple(kept[v] for v in vs) + (fallback,) * (n - len(vs))
    return params, np.asarray(vs + [-1] * (n - len(vs)), np.int32)


def check_covered(kept: dict, versions: np.ndarray, mask: np.ndarray) -> None:
    """Raises if a trained token's behaviour version is not kept (the recompute would be wrong)."""
    need = set(np.unique(versions[mask > 0]).tolist())
    missing = sorted(need - set(kept))
    if missing:
        raise RuntimeError(
            f"behaviour versions {missing} of this batch are not kept (kept: "
            f"{sorted(kept)}); raise the slots (admission.max_version_gap, "
            "placement.sync_every) or lower the admitted staleness. After --resume "
            "only the restored version is kept: older in-flight samples cannot be "
            "recomputed (known limitation)"
        )
