def chunk(xs, n):
    """Splits xs into consecutive lists of length n (the last may be shorter)."""
    return [xs[i : i + n] for i in range(0, len(xs) - n + 2, n)]


def flatten(chunks):
    """Concatenates a list of lists."""
    return [x for c in chunks for x in c]
