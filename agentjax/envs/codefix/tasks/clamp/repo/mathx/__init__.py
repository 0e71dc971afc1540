"""mathx: a tiny package with one bug."""

from mathx.core import clamp, lerp

__all__ = ["clamp", "lerp"]
