from ciphers import is_alpha, shift


def test_lower():
    assert shift("abc", 1) == "bcd"


def test_upper():
    assert shift("Hi", 2) == "Jk"


def test_alpha():
    assert is_alpha("abc")
