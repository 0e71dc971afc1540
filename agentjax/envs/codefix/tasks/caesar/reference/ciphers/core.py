def shift(s, k):
    """Caesar shift of ASCII letters by k places, keeping case; other characters unchanged."""
    out = []
    for ch in s:
        if "a" <= ch <= "z":
            out.append(chr((ord(ch) - ord("a") + k) % 26 + ord("a")))
        elif "A" <= ch <= "Z":
            out.append(chr((ord(ch) - ord("A") + k) % 26 + ord("A")))
        else:
            out.append(ch)
    return "".join(out)


def is_alpha(s):
    """True when s is non-empty and only letters."""
    return s.isalpha()
