"""ciphers: a tiny package with one bug."""

from ciphers.core import is_alpha, shift

__all__ = ["is_alpha", "shift"]
