"""wordfreq: a tiny package with one bug."""

from wordfreq.core import top_k, word_count

__all__ = ["top_k", "word_count"]
