"""Turn codec: the text of an episode's turns <-> the token ids the model reads and writes.

Lives in ``policy/`` with the tokenizers, below both the learner (warm-start demonstrations) and
the sampler (rollouts), so the two encode an episode the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from agentjax.policy.tokenizer import TURN_AGENT, TURN_ENV


def fit(toks: list[int], width: int, tail: int) -> tuple[list[int], int]:
    """The explicit rule for an over-long input: keep its head and its final ``tail`` tokens (the
    turn marker / the template's generation prompt) in ``width`` tokens; ``(kept, tokens cut)``.
    The rollout and the warm start's rows (:func:`agentjax.learner.sft.demo_rows`) both cut with
    it, so a model is trained on the inputs it will sample from."""
    if len(toks) <= width:
        return toks, 0
    return toks[: width - tail] + toks[-tail:], len(toks) - width


@dataclasses.dataclass(frozen=True)
class Codec:
    """Text <-> token ids for turns: ``<bos> obs <turn_agent> action <eos> <turn_env> obs ...``."""

    tokenizer: Any

    @property
    def stop(self) -> int:
        return self.tokenizer.eos_id

    def prompt(self, text: str) -> list[int]:
        return [self.tokenizer.bos_id, *self.tokenizer.encode(text), self.tokenizer.specials[TURN_AGENT]]

    def observation(self, text: str, after: Sequence[int] = ()) -> list[int]:
        """The environment's answer ``text`` to the action ``after`` (unused here; a chat codec
        may need it: :class:`agentjax.policy.chat_codec.ChatCodec`)."""
        sp = self.tokenizer.specials
        return [sp[TURN_ENV], *self.tokenizer.encode(text), sp[TURN_AGENT]]

    keep_tail = 1  # tokens at the end of an observation a cut keeps (the turn marker)

    def action_text(self, ids: Sequence[int]) -> str:
        ids = [int(i) for i in ids if int(i) != self.stop]
        return self.tokenizer.decode(ids, skip_specials=True)

    def action_ids(self, text: str) -> list[int]:
        """An action as the policy generates it (demonstrations): its tokens and the stop token."""
        return [*self.tokenizer.encode(text), self.stop]
