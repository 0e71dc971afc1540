"""textx: a tiny package with one bug."""

from textx.core import initials, slugify

__all__ = ["initials", "slugify"]
