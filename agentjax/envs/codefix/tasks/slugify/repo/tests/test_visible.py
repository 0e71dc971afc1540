from textx import initials, slugify


def test_simple():
    assert slugify("Hello World") == "hello-world"


def test_punct():
    assert slugify("Hello, World!") == "hello-world"


def test_initials():
    assert initials("portable network graphics") == "PNG"
