from mathx import clamp, lerp


def test_inside():
    assert clamp(5, 0, 10) == 5


def test_below():
    assert clamp(-3, 0, 10) == 0


def test_above():
    assert clamp(12, 0, 10) == 10


def test_lerp():
    assert lerp(0, 10, 0.5) == 5
