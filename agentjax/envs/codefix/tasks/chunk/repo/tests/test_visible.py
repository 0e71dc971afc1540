from batching import chunk, flatten


def test_even():
    assert chunk([1, 2, 3, 4], 2) == [[1, 2], [3, 4]]


def test_rest():
    assert chunk([1, 2, 3], 2) == [[1, 2], [3]]


def test_flatten():
    assert flatten([[1], [2, 3]]) == [1, 2, 3]
