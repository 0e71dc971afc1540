"""Turns through a HF chat template: the codec of a policy loaded from a HF directory.

Same interface as :class:`agentjax.sampling.rollout.Codec` (``prompt``, ``observation``,
``action_text``, ``action_ids``, ``stop``, ``keep_tail``), so the rollout, the warm start and the
evaluation are unchanged:

    prompt       = template.prompt(first observation, system, tools)        (loss mask 0)
    action       = generated tokens ... <end-of-turn>                         (loss mask 1)
    observation  = template.observation(tool output): the rest of the assistant message, the
                   tool message (with the id of the reply's call, for Mistral's formats) and
                   the next generation prompt                                 (loss mask 0)

so the loss mask covers exactly the tokens the policy generated, and a turn stops on the
template's end-of-turn token. ``action_text`` parses the reply's tool call
(:mod:`agentjax.toolcall.calls`); a malformed call raises ``ToolCallError`` (agent_error). With
``raw_replies`` (a task whose environment parses replies itself, ``parses_replies``: the dataset
task, where a reply without a call is the answer) the reply text goes to the environment as it
is, and a demonstration's action is the reply text the task wrote in the format.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from agentjax.policy.chat import ChatTemplate
from agentjax.policy.tokenizer import HFTokenizer
from agentjax.toolcall import calls as toolcalls
from agentjax.toolcall import formats as toolformats


@dataclasses.dataclass(frozen=True)
class ChatCodec:
    tokenizer: HFTokenizer
    template: ChatTemplate
    tools: tuple = ()  # OpenAI-style function schemas, given to the template
    tool_format: toolcalls.ToolFormat = toolcalls.ToolFormat.HERMES
    system: str = ""
    raw_replies: bool = False  # the environment parses the reply (see the module docstring)

    def __post_init__(self):
        object.__setattr__(self, "tool_format", toolcalls.ToolFormat.parse("tool_format", self.tool_format))
        toolcalls.require(self.tool_format)  # a format's parser is importable, checked at start
        tail = self.tokenizer.encode(self.template.observation(""))
        head = self.tokenizer.encode(self.template.observation("\x01"))
        keep = 0  # tokens of the next generation prompt, kept when an observation is cut
        while keep < min(len(tail), len(head)) and tail[-1 - keep] == head[-1 - keep]:
            keep += 1
        object.__setattr__(self, "_keep_tail", max(keep, 1))

    @property
    def stop(self) -> int:
        return self.tokenizer.specials[self.template.end_of_turn]

    @property
    def keep_tail(self) -> int:
        return self._keep_tail

    def prompt(self, text: str) -> list[int]:
        return self.tokenizer.encode(
            self.template.prompt(text, system=self.system, tools=list(self.tools) or None)
        )

    def observation(self, text: str, after: Sequence[int] = ()) -> list[int]:
        """The tool message ``text`` answering the reply ``after`` (its generated ids): a format
        whose tool messages carry the call's id (Mistral's) gets the id of that reply's call."""
        if self.tool_format not in toolformats.CALL_IDS:
            return self.tokenizer.encode(self.template.observation(text))
        reply = self.tokenizer.decode([int(i) for i in after if int(i) != self.stop], skip_specials=False)
        return self.tokenizer.encode(self.template.observation(text, toolformats.call_id(reply)))

    def action_text(self, ids: Sequence[int]) -> str:
        """The plain-format tool call in the generated reply (raises ``ToolCallError``)."""
        ids = [int(i) for i in ids if int(i) != self.stop]
        text = self.tokenizer.decode(ids, skip_specials=False)
        return text if self.raw_replies else toolcalls.parse(text, self.tool_format, self.tools)

    def action_ids(self, plain: str) -> list[int]:
        """A plain-format action as generated tokens (demonstrations), end-of-turn included."""
        reply = plain if self.raw_replies else toolcalls.render(plain, self.tool_format, self.tools)
        return [*self.tokenizer.encode(reply), self.stop]
