"""numerals: a tiny package with one bug."""

from numerals.core import from_digits, to_roman

__all__ = ["from_digits", "to_roman"]
