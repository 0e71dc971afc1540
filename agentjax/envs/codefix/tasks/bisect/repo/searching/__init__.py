"""searching: a tiny package with one bug."""

from searching.core import bisect_left, contains

__all__ = ["bisect_left", "contains"]
