from wordfreq import top_k, word_count


def test_basic():
    assert top_k("a b a", 1) == [("a", 2)]


def test_ties():
    assert top_k("pear apple pear apple fig", 2) == [("apple", 2), ("pear", 2)]


def test_count():
    assert word_count("one two  three") == 3
