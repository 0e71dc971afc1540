"""stats: a tiny package with one bug."""

from stats.core import mean, median

__all__ = ["mean", "median"]
