import re


def slugify(s):
    """Lower-case words joined by single dashes."""
    s = re.sub(r"[^a-z0-9]+", "-", s.lower())
    return s.rstrip("-")


def initials(s):
    """Upper-case first letters of each word."""
    return "".join(w[0].upper() for w in s.split())
