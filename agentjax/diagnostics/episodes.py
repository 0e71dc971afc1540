"""Readable sample episodes: a few of an evaluation's trajectories rendered as decoded text.

    samples(trajs, codec)  # -> [{"task_id", "label", "reward", "stop", "text"}, ...]

:func:`agentjax.diagnostics.evaluate.evaluate` puts them in its result as ``eval/samples``, so
every held-out evaluation row of ``metrics.jsonl`` carries them; the report shows the final
evaluation's (section "Sample episodes") and TensorBoard every evaluation's (a text summary,
:mod:`agentjax.diagnostics.tbevents`). Bounded: :data:`EPISODES` episodes, each text at most
:data:`MAX_CHARS` characters (a longer one keeps its head and tail and says how much it cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentjax.trajectory import Trajectory

EPISODES = 3
MAX_CHARS = 1500
KEY = "eval/samples"  # where an evaluation's result (and its metrics row) holds them


def _decode(tokenizer, ids, skip_specials: bool = True) -> str:
    ids = [int(i) for i in ids]
    try:
        return tokenizer.decode(ids, skip_specials=skip_specials)
    except TypeError:  # a tokenizer whose decode takes the ids only (the Tokenizer protocol)
        return tokenizer.decode(ids)


def cut(text: str, max_chars: int = MAX_CHARS) -> str:
    """``text``, or its head and tail around a note of how many characters were cut."""
    if len(text) <= max_chars:
        return text
    head, tail = (2 * max_chars) // 3, max_chars // 3
    return f"{text[:head]}\n... [{len(text) - head - tail} characters cut] ...\n{text[len(text) - tail :]}"


def render(traj: Trajectory, codec, max_chars: int = MAX_CHARS) -> str:
    """The episode as text, cut to ``max_chars``: its prompt (the first turn's context) and each
    observation decoded without special tokens (turn markers, the chat template's), each action
    as the model wrote it (its special tokens kept, e.g. tool-call markers; the stop token left
    out; not parsed, so a malformed tool call shows as written)."""
    tok, stop = codec.tokenizer, codec.stop
    lines = [f"[prompt] {_decode(tok, traj.turns[0].context)}"] if traj.turns else ["(no turns)"]
    for i, t in enumerate(traj.turns, 1):
        lines.append(f"[action {i}] {_decode(tok, [a for a in t.action if int(a) != stop], False)}")
        if t.observation.size:
            lines.append(f"[observation {i}] {_decode(tok, t.observation)}")
    return cut("\n".join(lines), max_chars)


def pick(trajs: Sequence[Trajectory], k: int = EPISODES) -> list[int]:
    """Indices of ``k`` episodes to show: the first of each verdict label (in task order), then
    the next ones in task order; the same episodes for the same results."""
    first: dict[Any, int] = {}
    for i, t in enumerate(trajs):
        first.setdefault(t.label, i)
    chosen = sorted(first.values())[:k]
    rest = [i for i in range(len(trajs)) if i not in chosen]
    return sorted(chosen + rest[: max(k - len(chosen), 0)])


def samples(trajs: Sequence[Trajectory], codec, k: int = EPISODES, max_chars: int = MAX_CHARS) -> list[dict]:
    """:func:`pick`'s episodes as JSON-ready dicts: task id, verdict label, reward (None: masked),
    stop reason and :func:`render`'s text."""
    return [sample(trajs[i], codec, max_chars) for i in pick(trajs, k)]


def sample(t: Trajectory, codec, max_chars: int = MAX_CHARS) -> dict:
    """One episode as :func:`samples` shows it."""
    return {
        "task_id": str(t.task_id),
        "label": t.label,
        "reward": None if t.final_reward is None else float(t.final_reward),
        "stop": getattr(t.stop_reason, "value", str(t.stop_reason)),
        "text": render(t, codec, max_chars),
    }


def markdown(shown: Sequence[dict], heading: str = "") -> str:
    """:func:`samples`' episodes as Markdown: a line per episode with its verdict (a heading
    when ``heading`` is ``"###"``, else bold), then its text as a code block."""
    out = []
    for i, s in enumerate(shown, 1):
        reward = s.get("reward")
        what = (
            f"task `{s.get('task_id')}`, verdict **{s.get('label')}**, reward "
            f"{'n/a (masked)' if reward is None else f'{reward:g}'}, stop `{s.get('stop')}`"
        )
        head = f"{heading} episode {i}: {what}" if heading else f"**episode {i}**: {what}"
        body = str(s.get("text", "")).replace("```", "'''")  # the code block stays one block
        out.append(f"{head}\n\n```\n{body}\n```")
    return "\n\n".join(out)
