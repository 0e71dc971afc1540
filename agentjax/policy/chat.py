"""A HF tokenizer directory's chat template, rendered as transformers renders it (jinja2).

    tok, chat = load_chat_tokenizer("/path/to/Qwen3-0.6B")
    ids = tok.encode(chat.render([{"role": "user", "content": "hi"}], add_generation_prompt=True))

The template comes from ``chat_template.jinja`` or ``tokenizer_config.json``'s ``chat_template``
and runs in jinja2's immutable sandbox with transformers' settings (``trim_blocks``,
``lstrip_blocks``, ``loopcontrols``, ``tojson``, ``raise_exception``, ``strftime_now``).
An episode is built incrementally, the way the sampler sees it: :meth:`ChatTemplate.prompt` is the
first user turn with the generation prompt; the assistant's generated tokens end with the
template's end-of-turn token (:attr:`ChatTemplate.end_of_turn`, found by rendering a probe
conversation: the special token that closes an assistant message); :meth:`ChatTemplate.observation`
is what the template writes after that token for a tool message, up to the next generation prompt.
Loading checks all of this once and fails with an :class:`HFImportError` naming the file.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

from agentjax.policy.hf import HFImportError
from agentjax.policy.tokenizer import HFTokenizer

_MARK_A, _MARK_T, _MARK_U = "\x00ASSISTANT\x00", "\x00TOOL\x00", "\x00USER\x00"
PROBE_ID = "a0b1c2d3e"  # a tool message's call id where none is known (9 alphanumerics: Mistral's)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message):
    from jinja2.exceptions import TemplateError  # noqa: PLC0415

    raise TemplateError(message)


def compile_template(source: str):
    """A jinja2 template in the environment transformers uses for ``apply_chat_template``."""
    import jinja2.ext  # noqa: PLC0415 - only HF checkpoints need it
    from jinja2.sandbox import ImmutableSandboxedEnvironment  # noqa: PLC0415

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    return env.from_string(source)


class ChatTemplate:
    """A compiled chat template plus the special-token strings it is rendered with."""

    def __init__(self, source: str, specials: dict[str, str], *, origin: str, token_ids: dict):
        self.source, self.origin, self.specials = source, origin, dict(specials)
        try:
            self._template = compile_template(source)
        except Exception as e:  # noqa: BLE001 - any jinja2 syntax error
            raise HFImportError(f"{origin}: the chat template does not compile: {e}") from None
        self.end_of_turn = self._probe(token_ids)

    def render(self, messages: list[dict], *, tools=None, add_generation_prompt: bool = False, **kw) -> str:
        return self._template.render(
            messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **self.specials, **kw
        )

    def prompt(self, text: str, *, system: str = "", tools=None) -> str:
        """The first turn: ``[system,] user`` and the generation prompt."""
        msgs = [{"role": "system", "content": system}] if system else []
        return self.render(
            [*msgs, {"role": "user", "content": text}], tools=tools, add_generation_prompt=True
        )

    def observation(self, text: str, call_id: str = PROBE_ID) -> str:
        """What follows the end-of-turn token of an assistant turn for a tool message ``text``
        answering call ``call_id`` (templates such as Mistral v0.3's require one; the others
        ignore it): the tool message and the next generation prompt."""
        full = self.render(
            [
                {"role": "user", "content": _MARK_U},
                {"role": "assistant", "content": _MARK_A},
                {"role": "tool", "content": text, "tool_call_id": call_id},
            ],
            add_generation_prompt=True,
        )
        return full.split(_MARK_A, 1)[1][len(self.end_of_turn) :]

    def _probe(self, token_ids: dict) -> str:
        """Finds the end-of-turn token and checks that tool messages render."""
        base = [{"role": "user", "content": _MARK_U}, {"role": "assistant", "content": _MARK_A}]
        try:
            tool = {"role": "tool", "content": _MARK_T, "tool_call_id": PROBE_ID}
            full = self.render([*base, tool], add_generation_prompt=True)
        except Exception as e:  # noqa: BLE001 - raise_exception or any rendering error
            raise HFImportError(
                f"{self.origin}: the chat template cannot render tool messages "
                f"(role 'tool'): {type(e).__name__}: {e}"
            ) from None
        if _MARK_T not in full or _MARK_A not in full:
            raise HFImportError(
                f"{self.origin}: the chat template cannot render tool messages: "
                "a tool message's content does not appear in its output"
            )
        after = full.split(_MARK_A, 1)[1]
        eot = max((t for t in token_ids if after.startswith(t)), key=len, default=None)
        if eot is None:
            raise HFImportError(
                f"{self.origin}: no end-of-turn token after an assistant message "
                f"(the template writes {after[:40]!r}); expected a special token"
            )
        return eot


def _token_string(v):
    return v.get("content") if isinstance(v, dict) else v


def load_chat_tokenizer(path: str | os.PathLike) -> tuple[HFTokenizer, ChatTemplate]:
    """``tokenizer.json`` + the chat template of a HF directory, checked; errors name the file."""
    path = Path(path)
    tfile, cfile, jfile = (
        path / "tokenizer.json",
        path / "tokenizer_config.json",
        path / "chat_template.jinja",
    )
    if not tfile.is_file():
        raise HFImportError(f"{tfile} not found: a HF directory needs tokenizer.json")
    cfg = {}
    if cfile.is_file():
        try:
            cfg = json.loads(cfile.read_text())
        except json.JSONDecodeError as e:
            raise HFImportError(f"{cfile}: not valid JSON ({e})") from None
    names = {r: _token_string(cfg.get(f"{r}_token")) for r in ("bos", "eos", "pad")}
    try:
        import tokenizers  # noqa: PLC0415

        raw = tokenizers.Tokenizer.from_file(str(tfile))
    except Exception as e:  # noqa: BLE001 - the Rust parser raises a plain Exception
        raise HFImportError(f"{tfile}: malformed tokenizer.json: {e}") from None
    try:
        tok = HFTokenizer(raw, **names)
    except ValueError as e:
        raise HFImportError(f"{cfile}: {e}") from None
    source, origin = cfg.get("chat_template"), cfile
    if jfile.is_file():
        source, origin = jfile.read_text(), jfile
    if isinstance(source, list):  # named templates: the "default" one
        source = {t.get("name"): t.get("template") for t in source}.get("default")
    if not source:
        raise HFImportError(
            f"{cfile}: no chat template (neither 'chat_template' here nor "
            f"{jfile.name}); a conversation cannot be rendered"
        )
    specials = {f"{r}_token": v for r, v in names.items() if v is not None}
    chat = ChatTemplate(source, specials, origin=str(origin), token_ids=tok.specials)
    if tok.specials.get(chat.end_of_turn) is None:
        raise HFImportError(f"{tfile}: end-of-turn token {chat.end_of_turn!r} has no id")
    return tok, chat
