def merge(intervals):
    """Merges overlapping or touching closed intervals; returns a sorted list of [lo, hi]."""
    out = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return out


def total_length(intervals):
    """Sum of lengths of already disjoint intervals."""
    return sum(hi - lo for lo, hi in intervals)
