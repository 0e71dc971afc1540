"""The ``--config`` flag of the entry points, every failure one line on stderr (exit 2).

    _CONFIG = configflag.define(DEFAULT)                  # instead of config_flags.DEFINE_config_file
    app.run(main, flags_parser=configflag.parse_flags)
    cfg = configflag.value(_CONFIG)                       # in main: the loaded config, or exit 2

A config file that cannot be loaded (missing, null bytes, a syntax error, ``get_config`` raising)
and a flag value of the wrong type (``--config.rl.steps=abc``) each print ``invalid config: ...``
naming the file or the flag, never a traceback. ml_collections fails at different moments for
each: while the flag is defined, while flags are parsed, and on the first use of the value.

Every section field is settable, whatever the file sets. ``ml_collections.config_flags`` overrides
only keys the file's dict already holds, so ``--config.loss.gspo.clip_low=...`` failed on the
default config. This flag loads the file, then fills every section with every field (the default
run's value, :mod:`agentjax.rundefaults`, else the component's own default), and opens each
built-in loss's sub-section, ``task.kwargs`` and ``loss.kwargs`` (a user's task or loss's own
arguments) to new keys. The filled values equal what ``runconfig.parse`` takes for an absent
field, so filling changes no run; every value is still validated by ``parse`` (a typo'd field,
``--config.rl.nosuch=1``, is an unknown field there, named in one line). The ``model`` section
stays as the file has it (its fields depend on ``model.hf_path``); new keys are accepted there too.
"""

from __future__ import annotations

import dataclasses
import enum
import sys
import typing

from absl import flags
from ml_collections import ConfigDict
from ml_collections.config_flags import config_flags


def _plain(value, hint):
    if isinstance(value, enum.Enum):
        return value.value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return value


def _fields(cls) -> dict:
    """``cls``'s fields at their defaults (None-valued ones left out: they take any type)."""
    hints, out = typing.get_type_hints(cls), {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:
            v = f.default_factory()
        else:
            continue
        if v is not None:
            out[f.name] = _plain(v, hints[f.name])
    return out


def complete(cfg: ConfigDict) -> ConfigDict:
    """``cfg`` with every section and field present (see the module doc); the file's values win."""
    from agentjax import rundefaults
    from agentjax.objectives import registry  # noqa: PLC0415
    from agentjax.run import config as runconfig  # noqa: PLC0415 - after flags, like the launchers

    full = {name: _fields(cls) for name, cls in runconfig._SECTIONS.items()}  # noqa: SLF001
    full["loss"].update({n: {} for n in registry.LOSSES})  # open: absent fields keep paper values
    full["task"]["kwargs"] = {}
    defaults = rundefaults.run_defaults()
    defaults.pop("model")
    given = cfg.to_dict()
    merged = rundefaults._merge(rundefaults._merge(full, defaults), given)  # noqa: SLF001
    return ConfigDict(merged)


class _Parser(config_flags.ConfigFileFlagParser):
    def parse(self, path):
        return complete(super().parse(path))


def define_config(name: str, default: str, help_string: str, *, flag_values=None, sys_argv=None):
    """``config_flags.DEFINE_config_file`` whose loaded config is :func:`complete`, open to new
    keys (``--config.loss.kwargs.beta=0.1``)."""
    flag_values = flags.FLAGS if flag_values is None else flag_values
    # private on purpose: DEFINE_config_file hard-codes its parser and parses the default inside the call
    flag = config_flags._ConfigFlag(  # noqa: SLF001
        parser=_Parser(name=name, lock_config=False),
        serializer=flags.ArgumentSerializer(),
        name=name,
        default=default,
        help_string=help_string,
        flag_values=flag_values,
        accept_new_attributes=True,
        sys_argv=sys_argv,
    )
    return flags.DEFINE_flag(flag, flag_values)


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
        return define_config("config", default, help_text)
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
