def clamp(x, lo, hi):
    """Limits x to the closed interval [lo, hi]."""
    if x < lo:
        return lo
    if x > hi:
        return lo
    return x


def lerp(a, b, t):
    """Linear interpolation between a and b."""
    return a + (b - a) * t
