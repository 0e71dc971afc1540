"""``Choice``: the base of every closed set of config values (a ``StrEnum``).

A member *is* its string (``SchedulerMode.SYNC == "sync"``, it hashes, formats and serialises as
``"sync"``), so configs written as strings keep working, while a dataclass field annotated with a
``Choice`` holds the member and :meth:`Choice.parse` rejects anything else with the field's name
and the allowed values. Open sets (registries a user extends: task names of a suite, presets,
fault classes) stay strings checked against their registry.
"""

from __future__ import annotations

import enum


class Choice(enum.StrEnum):
    def __repr__(self) -> str:  # as the string it is: messages read "mode='sync'" either way
        return repr(self.value)

    @classmethod
    def values(cls) -> list[str]:
        return [m.value for m in cls]

    @classmethod
    def parse(cls, field: str, value) -> Choice:
        """``value`` as a member; ``ValueError`` naming ``field`` and the allowed values."""
        try:
            return cls(value)
        except (ValueError, TypeError):  # TypeError: an unhashable value (a dict, a list)
            raise ValueError(f"{field}={value!r} is invalid; allowed values: {cls.values()}") from None


def coerce(obj, **fields: type[Choice]) -> None:
    """In a frozen dataclass's ``__post_init__``: each named field parsed into its ``Choice``."""
    for name, cls in fields.items():
        object.__setattr__(obj, name, cls.parse(name, getattr(obj, name)))
