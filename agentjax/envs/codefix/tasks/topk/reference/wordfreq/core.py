from collections import Counter


def top_k(text, k):
    """The k most frequent lower-case words as (word, count), ties broken alphabetically."""
    counts = Counter(text.lower().split())
    return sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:k]


def word_count(text):
    """Number of whitespace-separated words."""
    return len(text.split())
