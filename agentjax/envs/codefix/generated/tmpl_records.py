"""Generated-task templates: inventory / accounting and date-like counters (see ``templates.py``)."""

from __future__ import annotations

import random

from agentjax.envs.codefix.generated.templates import Site, Template


def _entries(r: random.Random) -> list:
    return [[r.choice(("credit", "debit")), r.randint(1, 50)] for _ in range(r.randint(0, 5))]


LEDGER = Template(
    name="ledger",
    domain="accounting",
    packages=("ledger", "books", "accounts"),
    helpers='''def fee(amount, pct):
    """pct percent of amount, rounded down to a whole unit."""
    return amount * pct // 100
''',
    core='''from .helpers import fee


def balance(entries, opening=@@opening@@):
    """opening plus the credits minus the debits of [kind, amount] entries."""
    total = opening
    for kind, amount in entries:
        if kind @@kind@@ "credit":
            total @@acc@@ amount
        else:
            total -= amount
    return total


def net(amount, pct):
    """amount less a fee of pct percent (rounded down)."""
    return amount - fee(amount, pct)
''',
    docs={
        "balance": "balance(entries, opening=0) is opening plus the credits minus the debits of "
        "[kind, amount] entries (kind 'credit' or 'debit').",
        "net": "net(amount, pct) is amount less a fee of pct percent, rounded down.",
    },
    args={
        "balance": lambda r: [_entries(r)] + ([] if r.random() < 0.6 else [r.randint(-20, 100)]),
        "net": lambda r: [r.randint(0, 500), r.randint(0, 30)],
    },
    sites={
        "opening": Site("constant", "balance", "0", ("100", "1"), ("-1",)),
        "kind": Site("inverted_condition", "balance", "==", ("!=",), (">=",)),
        "acc": Site("arithmetic", "balance", "+=", ("-=",), ("*=",)),
    },
)


def _stock(r: random.Random) -> dict:
    return {
        r.choice(("apple", "bolt", "cable", "drill", "eraser", "fuse")): r.randint(0, 9)
        for _ in range(r.randint(0, 5))
    }


STOCK = Template(
    name="stock",
    domain="inventory",
    packages=("inventory", "warehouse", "stockroom"),
    helpers='''def count(stock, name):
    """The count of name in stock; 0 when absent."""
    return stock.get(name, 0)
''',
    core='''from .helpers import count


def reorder(stock, threshold=@@thr@@):
    """Names whose count is below threshold, sorted by name."""
    out = []
    for name in sorted(stock):
        if count(stock, name) @@below@@ threshold:
            out.append(name)
    return out


def total_items(stock):
    """Sum of all counts."""
    return sum(stock.values())
''',
    docs={
        "reorder": "reorder(stock, threshold=5) lists, sorted by name, the items whose count is "
        "strictly below threshold.",
        "total_items": "total_items(stock) is the sum of all counts.",
    },
    args={
        "reorder": lambda r: [_stock(r)] + ([] if r.random() < 0.6 else [r.randint(0, 9)]),
        "total_items": lambda r: [_stock(r)],
    },
    sites={
        "thr": Site("constant", "reorder", "5", ("4", "6"), ("3",)),
        "below": Site("boundary", "reorder", "<", ("<=",), ("==",)),
    },
)

CALENDAR = Template(
    name="calendar",
    domain="dates",
    packages=("calendar_x", "dayscount", "datekit"),
    helpers="""MONTH_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
""",
    core='''from .helpers import MONTH_DAYS


def day_of_year(month, day):
    """1-based day of the year of (month, day) in a non-leap year."""
    return sum(MONTH_DAYS[: month @@obo@@]) @@op@@ day


def days_between(m1, d1, m2, d2):
    """Days from (m1, d1) to (m2, d2); negative when the second date is earlier."""
    return @@swap@@


def weekday(n):
    """Weekday index 0..6 of day n of the year when day 1 is a Monday (index 0)."""
    return (n - 1) % @@week@@
''',
    docs={
        "day_of_year": "day_of_year(month, day) is the 1-based day of the year of (month, day) in "
        "a non-leap year.",
        "days_between": "days_between(m1, d1, m2, d2) is the number of days from (m1, d1) to "
        "(m2, d2), negative when the second date is earlier.",
        "weekday": "weekday(n) is the weekday index 0..6 of day n of the year when day 1 is a "
        "Monday (index 0).",
    },
    args={
        "day_of_year": lambda r: _date(r),
        "days_between": lambda r: _date(r) + _date(r),
        "weekday": lambda r: [r.randint(1, 365)],
    },
    sites={
        "obo": Site("off_by_one", "day_of_year", "- 1", ("", "+ 1"), ("- 2",)),
        "op": Site("arithmetic", "day_of_year", "+", ("-",), ("*",)),
        "swap": Site(
            "swapped_args",
            "days_between",
            "day_of_year(m2, d2) - day_of_year(m1, d1)",
            ("day_of_year(m1, d1) - day_of_year(m2, d2)", "day_of_year(m2, d1) - day_of_year(m1, d2)"),
            ("day_of_year(d2, m2) - day_of_year(d1, m1)",),
        ),
        "week": Site("constant", "weekday", "7", ("6", "8"), ("5",)),
    },
)


def _date(r: random.Random) -> list:
    m = r.randint(1, 12)
    return [m, r.randint(1, 28)]


CLOCK = Template(
    name="clock",
    domain="dates",
    packages=("clockface", "timeofday", "hhmm"),
    helpers='''def pad(n):
    """n as two digits."""
    return str(n).rjust(2, "0")
''',
    core='''from .helpers import pad


def add_minutes(hh, mm, delta):
    """[hh, mm] after delta minutes (delta may be negative), wrapping at midnight."""
    total = (hh * 60 @@op@@ mm + delta) % @@day@@
    return @@swap@@


def label(hh, mm):
    """'HH:MM' with two digits each."""
    return pad(hh) + ":" + pad(mm)
''',
    docs={
        "add_minutes": "add_minutes(hh, mm, delta) returns [hh, mm] of the time delta minutes "
        "after hh:mm (delta may be negative), wrapping at midnight.",
        "label": "label(hh, mm) formats the time as 'HH:MM'.",
    },
    args={
        "add_minutes": lambda r: [
            r.randint(0, 23),
            r.randint(0, 59),
            r.choice((r.randint(-200, 200), r.randint(-3000, 3000))),
        ],
        "label": lambda r: [r.randint(0, 23), r.randint(0, 59)],
    },
    sites={
        "op": Site("arithmetic", "add_minutes", "+", ("-",), ("*",)),
        "day": Site("constant", "add_minutes", "1440", ("1400", "720"), ("1439",)),
        "swap": Site(
            "swapped_args",
            "add_minutes",
            "[total // 60, total % 60]",
            ("[total % 60, total // 60]",),
            ("[total // 60, total // 60]", "[total % 60, total % 60]"),
        ),
    },
)

TEMPLATES = (LEDGER, STOCK, CALENDAR, CLOCK)
