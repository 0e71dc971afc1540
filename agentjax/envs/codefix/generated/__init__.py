"""Generated codefix tasks: seeded small repositories with one planted bug from a family.

See ``docs/codefix.md`` ("Generated tasks"): :mod:`.templates` (families, templates, split rule),
:mod:`.render` (one seeded task), :mod:`.check` (host validation), :mod:`.store` (the sandbox
validation pass, the on-disk cache and :class:`agentjax.envs.codefix.api.Task` objects).
"""
