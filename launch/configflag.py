"""The ``--config`` flag of the entry points: every section field settable, whatever the file sets.

``ml_collections.config_flags`` overrides only keys the config file's dict already holds, so
``--config.loss.gspo.clip_low=...`` or ``--config.curriculum.enabled=True`` failed on the default
config. This flag loads the file, then fills every section with every field (the default run's
value, :mod:`agentjax.rundefaults`, else the component's own default), and opens each built-in
loss's sub-section, ``task.kwargs`` and ``loss.kwargs`` (a user's task or loss's own arguments)
to new keys. The filled values equal what ``runconfig.parse`` would
take for an absent field, so filling changes no run; every value is still validated by ``parse``
(a typo'd field is an unknown field there, naming it). The ``model`` section stays as the file
has it (its fields depend on ``model.hf_path``); new keys are accepted there too.
"""

from __future__ import annotations

import dataclasses
import enum
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
    from agentjax import runconfig, rundefaults  # noqa: PLC0415 - after flags, like the launchers
    from agentjax.objectives import registry  # noqa: PLC0415

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
    flag = config_flags._ConfigFlag(  # noqa: SLF001 - DEFINE_config_file takes no parser
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
