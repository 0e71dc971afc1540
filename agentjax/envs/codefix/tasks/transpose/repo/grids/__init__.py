"""grids: a tiny package with one bug."""

from grids.core import shape, transpose

__all__ = ["shape", "transpose"]
