"""batching: a tiny package with one bug."""

from batching.core import chunk, flatten

__all__ = ["chunk", "flatten"]
