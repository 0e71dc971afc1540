"""leapyear: a tiny package with one bug."""

from leapyear.core import days_in_year, is_leap

__all__ = ["days_in_year", "is_leap"]
