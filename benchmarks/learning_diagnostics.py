"""What moves when RL collapses: per-step diagnostics of a launch.train workdir (minirepo).

    python benchmarks/learning_diagnostics.py workdir/default [--json out.json]

From the run's own records (no re-run): ``journal.bin`` (every verified trajectory with its
behaviour log-probs, versions and observations) and ``metrics.jsonl`` (the learner's rows).
Per policy version v (the trajectories sampled with v's weights, by their first action token):

- ``reward``: mean final reward of the trajectories sampled at v;
- ``entropy@k``: policy entropy at the k-th action token of a turn, estimated without bias by
  the mean of ``-log pi(token)`` over the sampled tokens (temperature 1: sampled = raw log-prob);
  k = 0 is the tool name, 1.. its arguments;
- ``all_same``: share of GRPO groups (same task, same draw) whose rewards are all equal (zero
  advantage for every member: no learning signal);
- ``adv_abs``: mean |advantage| of the group-normalised advantages, ``adv_max`` the largest;
- ``malformed``: share of actions the environment answered with a malformed-action error;
- from the learner's row of step v+1: ``grad_norm``, ``ratio_max``, ``filter`` (IcePop share),
  ``kl`` (to the warm start, when ``loss.kl_coef`` > 0).

``--choices``: on the tasks whose first ``run`` reports two or more failing functions, which
function the first ``view`` names (per bucket of ``--bucket`` versions): the *first* failing one
(the demonstrator's rule; never the fix on these tasks), the *last* failing one (the localising
rule), another failing one, a name the report does not list, or no well-formed ``view``; each with
the mean reward of the trajectories that chose it. This is where RL has to move probability.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agentjax.envs import minirepo  # noqa: E402
from agentjax.learner.journal import Journal  # noqa: E402
from agentjax.policy.tokenizer import WordTokenizer  # noqa: E402

MALFORMED = ("error bad args", "error unknown tool", "error unknown name", "error body")
POSITIONS = 4


def diagnose(workdir: str, group_size: int = 8) -> list[dict]:
    tok = WordTokenizer(minirepo.vocabulary())
    trajs = Journal(os.path.join(workdir, "journal.bin")).read()
    rows = [json.loads(x) for x in open(os.path.join(workdir, "metrics.jsonl")) if x.strip()]
    learner = {r["step"]: r for r in rows if "loss/total" in r}
    by_v: dict[int, list] = defaultdict(list)
    for t in trajs:
        if t.num_action_tokens and t.final_reward is not None:
            by_v[int(t.versions.min())].append(t)
    out = []
    for v in sorted(by_v):
        ts = by_v[v]
        ent = [[] for _ in range(POSITIONS)]
        actions = malformed = 0
        for t in ts:
            for turn in t.turns:
                for k in range(min(POSITIONS, turn.action.size)):
                    ent[k].append(-float(turn.logp_raw[k]))
                actions += 1
                obs = tok.decode([int(i) for i in turn.observation], skip_specials=True)
                malformed += obs.startswith(MALFORMED)
        groups: dict = defaultdict(list)
        for t in ts:
            groups[(t.task_id, t.submit_index // group_size)].append(float(t.final_reward))
        same = [len(set(g)) == 1 for g in groups.values() if len(g) > 1]
        adv = []
        for g in groups.values():
            x = np.asarray(g)
            if x.size > 1:
                adv.extend(((x - x.mean()) / (x.std() + 1e-6)).tolist())
        lr = learner.get(v + 1, {})
        out.append(
            {
                "version": v,
                "n": len(ts),
                "reward": float(np.mean([t.final_reward for t in ts])),
                **{f"entropy@{k}": float(np.mean(e)) if e else float("nan") for k, e in enumerate(ent)},
                "all_same": float(np.mean(same)) if same else float("nan"),
                "adv_abs": float(np.mean(np.abs(adv))) if adv else 0.0,
                "adv_max": float(np.max(np.abs(adv))) if adv else 0.0,
                "malformed": malformed / max(actions, 1),
                "grad_norm": lr.get("grad_norm", float("nan")),
                "ratio_max": lr.get("loss/ratio/max", float("nan")),
                "filter": lr.get("masked/filter_icepop", float("nan")),
                "kl": lr.get("loss/kl", float("nan")),
            }
        )
    return out


def table(rows: list[dict], every: int = 5) -> str:
    keys = [
        "version",
        "n",
        "reward",
        *[f"entropy@{k}" for k in range(POSITIONS)],
        "all_same",
        "adv_abs",
        "malformed",
        "grad_norm",
        "ratio_max",
        "filter",
        "kl",
    ]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        if r["version"] % every == 0 or r is rows[-1]:
            lines.append(
                "| "
                + " | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys)
                + " |"
            )
    return "\n".join(lines)


CHOICES = ("first", "last", "middle", "unlisted", "no_view")


def choices(workdir: str, bucket: int = 10) -> list[dict]:
    """Share (and mean reward) of each first-``view`` choice on multi-failure tasks, per bucket."""
    tok = WordTokenizer(minirepo.vocabulary())
    count: dict = defaultdict(lambda: defaultdict(list))
    for t in Journal(os.path.join(workdir, "journal.bin")).read():
        if len(t.turns) < 2 or t.final_reward is None:
            continue
        report = tok.decode([int(i) for i in t.turns[0].observation], skip_specials=True).split()
        fails = [report[i + 1] for i, w in enumerate(report[:-1]) if w == "fail"]
        if len(fails) < 2:
            continue
        action = tok.decode([int(i) for i in t.turns[1].action], skip_specials=True).split()
        if len(action) != 2 or action[0] != "view":
            c = "no_view"
        elif action[1] == fails[0]:
            c = "first"
        elif action[1] == fails[-1]:
            c = "last"
        else:
            c = "middle" if action[1] in fails else "unlisted"
        count[int(t.versions.min()) // bucket * bucket][c].append(float(t.final_reward))
    out = []
    for v in sorted(count):
        n = sum(len(x) for x in count[v].values())
        row: dict = {"versions": f"{v}-{v + bucket - 1}", "n": n}
        for c in CHOICES:
            r = count[v][c]
            row[c] = len(r) / n
            row[f"{c}_reward"] = float(np.mean(r)) if r else float("nan")
        out.append(row)
    return out


def choices_table(rows: list[dict]) -> str:
    lines = [
        "| versions | n | " + " | ".join(CHOICES) + " |",
        "|" + "---|" * (len(CHOICES) + 2),
    ]
    for r in rows:
        cells = [f"{r[c]:.2f} (r {r[c + '_reward']:.2f})" if r[c] else "0.00" for c in CHOICES]
        lines.append(f"| {r['versions']} | {r['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workdir")
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--choices", action="store_true", help="also the first-view choice table")
    ap.add_argument("--bucket", type=int, default=10)
    a = ap.parse_args()
    rows = diagnose(a.workdir)
    print(table(rows, a.every))
    picked = choices(a.workdir, a.bucket) if a.choices else []
    if picked:
        print()
        print(choices_table(picked))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"versions": rows, "choices": picked} if picked else rows, f, indent=1)


if __name__ == "__main__":
    main()
