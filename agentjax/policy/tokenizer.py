"""Tokenizers: a built-in word-level one for the built-in tasks and a HF ``tokenizer.json`` loader.

Both satisfy :class:`Tokenizer`: ``encode(text) -> list[int]``, ``decode(ids) -> str``,
``vocab_size`` and the special-token ids (``pad_id``, ``bos_id``, ``eos_id``, ``specials``).
Environments speak text; the rollout loop turns text into ids with one of these.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
TURN_AGENT, TURN_ENV, TOOL_OPEN, TOOL_CLOSE = "<turn_agent>", "<turn_env>", "<tool>", "</tool>"
DEFAULT_SPECIALS = (PAD, BOS, EOS, UNK, TURN_AGENT, TURN_ENV, TOOL_OPEN, TOOL_CLOSE)


@runtime_checkable
class Tokenizer(Protocol):
    """What the sampler, the rollout loop and the environments need from a tokenizer."""

    vocab_size: int
    pad_id: int
    bos_id: int | None
    eos_id: int | None
    specials: Mapping[str, int]  # special token string -> id

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Iterable[int]) -> str: ...


class WordTokenizer:
    """Whitespace word-level tokenizer with special tokens; ids are fixed by construction order.

    Ids ``0 .. len(specials)-1`` are the specials in the given order (``<pad>`` = 0 by default),
    then the words in the given order. Special tokens are recognised inside text even without
    surrounding spaces (``"<tool>ls</tool>"`` is three tokens). Unknown words map to ``<unk>``
    when it is a special, else raise ``KeyError``. ``decode`` joins tokens with single spaces,
    so ``decode(encode(t)) == " ".join(t.split())`` for text made of known words and specials.
    """

    def __init__(self, words: Sequence[str], specials: Sequence[str] = DEFAULT_SPECIALS):
        tokens = list(specials) + list(words)
        dup = sorted({t for t in tokens if tokens.count(t) > 1})
        if dup:
            raise ValueError(f"duplicate tokens {dup[:5]}: ids would be ambiguous")
        bad = [w for w in words if not w or any(ch.isspace() for ch in w)]
        if bad:
            raise ValueError(f"words must be non-empty and contain no whitespace: {bad[:5]}")
        if PAD not in specials:
            raise ValueError(f"specials must include {PAD!r} (padding); got {list(specials)}")
        self.words, self.special_tokens = tuple(words), tuple(specials)
        self._id = {t: i for i, t in enumerate(tokens)}
        self._tok = tokens
        self.vocab_size = len(tokens)
        self.specials = {s: self._id[s] for s in specials}
        self.pad_id = self._id[PAD]
        self.bos_id, self.eos_id = self._id.get(BOS), self._id.get(EOS)
        self.unk_id = self._id.get(UNK)
        by_len = sorted(specials, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(re.escape(s) for s in by_len) + ")")

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str],
        specials: Sequence[str] = DEFAULT_SPECIALS,
    ) -> WordTokenizer:
        """Vocabulary = the sorted distinct words of ``texts`` (specials excluded)."""
        probe = cls([], specials)
        words = {w for t in texts for w in probe._words(t)} - set(specials)
        return cls(sorted(words), specials)

    def _words(self, text: str) -> list[str]:
        return [w for part in self._split.split(text) for w in part.split()]

    def token_id(self, token: str) -> int:
        """Id of one word or special token (``<unk>``'s id for an unknown word, if it exists)."""
        if token in self._id:
            return self._id[token]
        if self.unk_id is None:
            raise KeyError(f"word {token!r} is not in the vocabulary and there is no {UNK!r}")
        return self.unk_id

    def encode(self, text: str) -> list[int]:
        return [self.token_id(w) for w in self._words(text)]

    def decode(self, ids: Iterable[int], *, skip_specials: bool = False) -> str:
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is out of range [0, {self.vocab_size})")
            if not (skip_specials and i < len(self.special_tokens)):
                out.append(self._tok[i])
        return " ".join(out)

    def to_dict(self) -> dict:
        """JSON-able description; ``WordTokenizer.from_dict(tok.to_dict())`` rebuilds it."""
        return {"words": list(self.words), "specials": list(self.special_tokens)}

    @classmethod
    def from_dict(cls, d: Mapping) -> WordTokenizer:
        return cls(d["words"], d["specials"])


class HFTokenizer:
    """A local HF ``tokenizer.json`` through the ``tokenizers`` package (no hub access)."""

    def __init__(
        self,
        tok,
        *,
        bos: str | None = None,
        eos: str | None = None,
        pad: str | None = None,
        add_special_tokens: bool = False,
    ):
        self._tok = tok
        self.add_special_tokens = add_special_tokens
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.specials = {t.content: i for i, t in tok.get_added_tokens_decoder().items() if t.special}
        ids = {}
        for role, token in (("bos", bos), ("eos", eos), ("pad", pad)):
            ids[role] = None if token is None else tok.token_to_id(token)
            if token is not None and ids[role] is None:
                raise ValueError(f"{role} token {token!r} is not in the tokenizer's vocabulary")
        self.bos_id, self.eos_id = ids["bos"], ids["eos"]
        pad_id = ids["pad"] if ids["pad"] is not None else self.eos_id
        self.pad_id = 0 if pad_id is None else pad_id

    @classmethod
    def from_file(cls, path: str | os.PathLike, **kw) -> HFTokenizer:
        """Loads ``path`` (a ``tokenizer.json``, or a directory holding one).

        A ``tokenizer_config.json`` next to it (if present) names the bos/eos/pad tokens; keyword
        arguments ``bos``, ``eos``, ``pad`` (token strings) take precedence. Without a pad token
        padding uses eos (else id 0); padded positions are masked out anyway.
        """
        import tokenizers  # imported here: only needed for HF checkpoints

        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(f"{file} not found: expected a HF tokenizer.json")
        names = {}
        tc = file.parent / "tokenizer_config.json"
        if tc.is_file():
            cfg = json.loads(tc.read_text())
            for role in ("bos", "eos", "pad"):
                v = cfg.get(f"{role}_token")
                names[role] = v.get("content") if isinstance(v, dict) else v
        names.update(kw)
        return cls(tokenizers.Tokenizer.from_file(str(file)), **names)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=self.add_special_tokens).ids)

    def decode(self, ids: Iterable[int], *, skip_specials: bool = False) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_specials)
