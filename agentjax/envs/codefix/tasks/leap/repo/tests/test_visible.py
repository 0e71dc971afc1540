from leapyear import is_leap


def test_common():
    assert not is_leap(2023)


def test_leap():
    assert is_leap(2024)


def test_2000():
    assert is_leap(2000)
