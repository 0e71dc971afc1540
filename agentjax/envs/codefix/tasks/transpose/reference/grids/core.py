def transpose(m):
    """Transpose of a rectangular list-of-lists matrix."""
    if not m:
        return []
    return [[m[r][c] for r in range(len(m))] for c in range(len(m[0]))]


def shape(m):
    """(rows, cols) of a rectangular matrix."""
    return (len(m), len(m[0]) if m else 0)
