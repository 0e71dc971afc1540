"""The ``--config`` flag of the entry points, every failure one line on stderr (exit 2).

    _CONFIG = configflag.define(DEFAULT)                  # instead of config_flags.DEFINE_config_file
    app.run(main, flags_parser=configflag.parse_flags)
    cfg = configflag.value(_CONFIG)                       # in main: the loaded config, or exit 2

A config file that cannot be loaded (missing, null bytes, a syntax error, ``get_config`` raising),
an override of a field the config lacks (``--config.rl.nosuch=1``) and a flag value of the wrong
type (``--config.rl.steps=abc``) each print ``invalid config: ...`` naming the file or the flag,
never a traceback. ml_collections fails at different moments for each: while the flag is defined
(an override of the default file), while flags are parsed, and on the first use of the value.
"""

from __future__ import annotations

import sys

from absl import flags
from ml_collections import config_flags

_default = ""


def error_line(argv: list[str], e: BaseException) -> str:
    """One line naming what could not be parsed: a flag, the config file, or an override."""
    text = "; ".join(x.strip() for x in f"{e}".splitlines() if x.strip())[:400]
    if isinstance(e, flags.Error):  # a flag's value, e.g. --config.rl.steps=abc
        return text
    path = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
    if path is None and "--config" in argv[:-1]:
        path = argv[argv.index("--config") + 1]
    path = path or _default
    if isinstance(e, SyntaxError | OSError | ImportError | UnicodeDecodeError) or "null bytes" in text:
        return f"config file --config={path} cannot be loaded: {type(e).__name__}: {text}"
    overrides = [a.split("=", 1)[0] for a in argv if a.startswith("--config.")]
    return f"--config={path} with overrides {overrides} failed: {type(e).__name__}: {text}"


def _fail(argv: list[str], e: BaseException):
    print(f"invalid config: {error_line(argv, e)}", file=sys.stderr)
    sys.exit(2)


def define(default: str, help_text: str = "Run configuration (configs/*.py)."):
    """``DEFINE_config_file("config", default)``; an override the default file lacks exits here."""
    global _default
    _default = default
    try:
        return config_flags.DEFINE_config_file("config", default, help_text)
    except Exception as e:  # noqa: BLE001 - reported in one line, never a traceback
        _fail(sys.argv, e)


def parse_flags(argv: list[str]) -> list[str]:
    """absl's flag parsing (``app.run(..., flags_parser=parse_flags)``), failures in one line."""
    try:
        return flags.FLAGS(argv)
    except Exception as e:  # noqa: BLE001 - reported in one line, never a traceback
        _fail(argv, e)


def value(holder):
    """The loaded config; a file that failed to load raises only on first use, so it is used here."""
    try:
        cfg = holder.value
        cfg.get("placement", {})
        return cfg
    except Exception as e:  # noqa: BLE001 - reported in one line, never a traceback
        _fail(sys.argv, e)
