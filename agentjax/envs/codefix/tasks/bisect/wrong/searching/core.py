def bisect_left(a, x):
    """Leftmost insertion index of x in the sorted list a."""
    lo, hi = 1, len(a)
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


def contains(a, x):
    """Linear membership test."""
    return any(v == x for v in a)
