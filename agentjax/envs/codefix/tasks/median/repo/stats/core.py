def median(xs):
    """Median of a non-empty sequence of numbers."""
    s = sorted(xs)
    n = len(s)
    if n % 2:
        return s[n // 2]
    return (s[n // 2] + s[n // 2 + 1]) / 2


def mean(xs):
    """Arithmetic mean of a non-empty sequence."""
    return sum(xs) / len(xs)
