from rpncalc import evaluate, tokens


def test_add():
    assert evaluate("2 3 +") == 5


def test_sub():
    assert evaluate("10 4 -") == 6


def test_tokens():
    assert tokens("1 2 +") == 3
