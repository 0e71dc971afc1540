from numerals import from_digits, to_roman


def test_small():
    assert to_roman(4) == "IV"


def test_ninety():
    assert to_roman(94) == "XCIV"


def test_digits():
    assert from_digits("042") == 42
