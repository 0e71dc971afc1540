from grids import shape, transpose


def test_square():
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]


def test_rect():
    assert transpose([[1, 2, 3]]) == [[1], [2], [3]]


def test_shape():
    assert shape([[1, 2]]) == (1, 2)
