def transpose(m):
    """Transpose of a rectangular list-of-lists matrix."""
    n = len(m[0]) if m else 0
    return [[m[r][c] for r in range(n)] for c in range(n)]


def shape(m):
    """(rows, cols) of a rectangular matrix."""
    return (len(m), len(m[0]) if m else 0)
