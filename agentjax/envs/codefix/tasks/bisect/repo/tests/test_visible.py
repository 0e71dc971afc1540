from searching import bisect_left, contains


def test_middle():
    assert bisect_left([1, 3, 5], 3) == 1


def test_end():
    assert bisect_left([1, 3, 5], 9) == 3


def test_contains():
    assert contains([1, 2], 2)
