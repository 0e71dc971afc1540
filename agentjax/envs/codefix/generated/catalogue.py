"""Every template of the generator, by name (the template modules import ``templates``; this
module sits above them, so the import graph has no cycle)."""

from __future__ import annotations

from agentjax.envs.codefix.generated import tmpl_lists, tmpl_records, tmpl_text
from agentjax.envs.codefix.generated.templates import Template


def registry() -> dict[str, Template]:
    out: dict[str, Template] = {}
    for t in (*tmpl_lists.TEMPLATES, *tmpl_text.TEMPLATES, *tmpl_records.TEMPLATES):
        if t.name in out:
            raise ValueError(f"duplicate template name {t.name!r}")
        out[t.name] = t
    return out
