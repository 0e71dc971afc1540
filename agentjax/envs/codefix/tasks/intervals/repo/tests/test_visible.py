from spans import merge, total_length


def test_overlap():
    assert merge([[1, 3], [2, 6]]) == [[1, 6]]


def test_touching():
    assert merge([[1, 2], [2, 4]]) == [[1, 4]]


def test_length():
    assert total_length([[0, 2], [5, 6]]) == 3
