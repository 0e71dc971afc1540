"""rpncalc: a tiny package with one bug."""

from rpncalc.core import evaluate, tokens

__all__ = ["evaluate", "tokens"]
