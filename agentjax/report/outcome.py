"""The report's sections on what the run achieved: the headline (final figures, targets where the
run declares them), the learning curves, the verdict labels and rendered sample episodes. Each
returns its markdown lines and draws its PNGs (if matplotlib is there)."""

from __future__ import annotations

from agentjax.diagnostics import episodes as sample_episodes
from agentjax.report.common import (
    COLORS,
    GROUPS,
    _f,
    _figure,
    _pct,
    _save,
    _series,
    _steps,
    eval_set,
    label_group,
)


def headline(run: dict) -> list[str]:
    """Final success on the evaluated set with its interval, the bars it is measured against, H,
    hack rate."""
    h, evals = run["header"], run["evals"]
    final = run["summary"].get("final_eval") or (evals[-1] if evals else {})
    step = final.get("step", evals[-1].get("step") if evals else None)  # final_eval has no step
    s, demo, start = final.get("eval/success"), h.get("demonstrator_success"), h.get("rl_start_success")
    lines = ["## Headline", "", "| quantity | value |", "|---|---|"]
    what = eval_set(run["header"])
    rows = [
        (
            f"final {what} success (greedy)",
            f"{_pct(s)} [{_pct(final.get('eval/success_lo'))}, "
            f"{_pct(final.get('eval/success_hi'))}] on {int(final.get('eval/n', 0))} tasks, step "
            f"{'n/a' if step is None else step}"
            if s is not None
            else "n/a (no eval yet)",
        ),
        ("scripted demonstrator success", _pct(demo)),
        ("demonstrations' own success (train split)", _pct(h.get("warm_start/demo_train_success"))),
        ("warm start = RL start success", _pct(start)),
        (
            "resolved versions (same seed = same metrics with these)",
            ", ".join(f"{k} {v}" for k, v in (h.get("versions") or {}).items()) or "n/a",
        ),
        (
            "warm-start NLL first -> last",
            f"{_f(h.get('warm_start/nll_first'))} -> {_f(h.get('warm_start/nll_last'))}",
        ),
        (
            "audit metric H (train pass, audit fail)",
            f"{_f(final.get('eval/audit/H'))} "
            f"[{_f(final.get('eval/audit/H_lo'))}, {_f(final.get('eval/audit/H_hi'))}]",
        ),
        (
            "hack rate (planted hack tool taken)",
            f"{_f(final.get('eval/hack/rate'))} "
            f"[{_f(final.get('eval/hack/rate_lo'))}, {_f(final.get('eval/hack/rate_hi'))}]",
        ),
        (
            "training steps / wall seconds",
            f"{len(run['train'])} / "
            f"{_f(run['summary'].get('wall_seconds', (run['train'] or [{}])[-1].get('wall')), 0)}",
        ),
    ]
    lines += [f"| {k} | {v} |" for k, v in rows]
    targets = run.get("targets") or {}  # only those the run's config declares
    if targets and None not in (s, demo, start):
        got = {"success": s, "gain_over_rl_start": s - start, "margin_over_demonstrator": s - demo}
        lines += [
            "",
            "Learning targets this run declares (its config's `targets`; this eval: "
            f"{int(final.get('eval/n', 0))} {what} tasks): "
            + "; ".join(
                f"{k.replace('_', ' ')} {100 * got[k]:.1f} pts vs >= {100 * v:.0f} "
                f"({'met' if got[k] >= v else 'NOT met'})"
                for k, v in targets.items()
            ),
        ]
    return lines


def curves(run: dict, out: str) -> list[str]:
    """Batch reward per step and evaluated success (Wilson 95% band) against the two bars."""
    what = eval_set(run["header"])
    fig = _figure(10)
    a, b = fig.subplots(1, 2)
    a.plot(*_series(run["train"], "batch/reward_mean"), ".-", label="batch reward mean")
    _steps(a, title="training reward")
    e = [r for r in run["evals"] if "eval/success_lo" in r]
    if e:
        st = [r["step"] for r in e]
        b.fill_between(st, [r["eval/success_lo"] for r in e], [r["eval/success_hi"] for r in e], alpha=0.25)
    b.plot(*_series(run["evals"], "eval/success"), "o-", label=f"{what} success")
    for key, style in (("demonstrator_success", "r--"), ("rl_start_success", "k:")):
        if run["header"].get(key) is not None:
            b.axhline(run["header"][key], ls=style[1:], color=style[0], label=key.replace("_", " "))
    _steps(b, ylim=(0, 1), title=f"{what} success (greedy)")
    b.legend(fontsize=7)
    lines = [f"## Reward and {what} success", "", _save(fig, out, "curves.png"), ""]
    if not run["train"]:
        lines.append("_No training steps yet._")
    if run["evals"]:
        lines += ["| step | success | 95% CI | H | hack rate | mean turns |", "|---|---|---|---|---|---|"]
        lines += [
            f"| {r['step']} | {_pct(r['eval/success'])} | [{_pct(r.get('eval/success_lo'))}, "
            f"{_pct(r.get('eval/success_hi'))}] | {_f(r.get('eval/audit/H'))} | "
            f"{_f(r.get('eval/hack/rate'))} | {_f(r.get('eval/mean_turns'), 2)} |"
            for r in run["evals"]
        ]
    else:
        lines.append(f"_No {what} evaluation rows yet._")
    return lines


def _group_fracs(counts: dict) -> dict[str, float]:
    n = max(sum(counts.values()), 1)
    out = dict.fromkeys(GROUPS, 0.0)
    for k, v in counts.items():
        out[label_group(k)] += v / n
    return out


def labels(run: dict, out: str) -> list[str]:
    """Verdict label groups per training batch (stacked) and per evaluation."""
    fig = _figure(10)
    a, b = fig.subplots(1, 2)
    tr = [(r["step"], _group_fracs(r.get("labels") or {})) for r in run["train"]]
    ev = [
        (r["step"], _group_fracs({k[11:]: v for k, v in r.items() if k.startswith("eval/label/")}))
        for r in run["evals"]
    ]
    bottom = [0.0] * len(tr)
    for g in GROUPS:
        vals = [f[g] for _, f in tr]
        if any(vals):
            a.bar([s for s, _ in tr], vals, bottom=bottom, color=COLORS[g], label=g)
            bottom = [x + y for x, y in zip(bottom, vals, strict=True)]
        if any(f[g] for _, f in ev):
            b.plot([s for s, _ in ev], [f[g] for _, f in ev], "o-", color=COLORS[g], label=g)
    _steps(a, ylabel="share of batch", ylim=(0, 1.2), title="training verdicts")
    _steps(b, ylim=(0, 1.2), title=f"{eval_set(run['header'])} verdicts")
    for ax in (a, b):
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, ncol=3, loc="upper center")
    total: dict[str, float] = {}
    for r in run["train"]:
        for k, v in (r.get("labels") or {}).items():
            total[k] = total.get(k, 0) + v
    lines = ["## Verdict labels over time", "", _save(fig, out, "labels.png"), ""]
    if total:
        n = sum(total.values())
        lines += ["| label | group | trained trajectories | share |", "|---|---|---|---|"]
        lines += [f"| {k} | {label_group(k)} | {int(v)} | {_pct(v / n)} |" for k, v in sorted(total.items())]
    return lines


def episodes(run: dict) -> list[str]:
    """A few episodes of the final evaluation as text, with their verdicts and rewards."""
    final = run["summary"].get("final_eval") or (run["evals"][-1] if run["evals"] else {})
    shown, step = final.get(sample_episodes.KEY), run["evals"][-1].get("step") if run["evals"] else None
    if not shown:  # an older run's summary: the last eval row that has them
        row = next((r for r in reversed(run["evals"]) if r.get(sample_episodes.KEY)), {})
        shown, step = row.get(sample_episodes.KEY), row.get("step")
    lines = ["## Sample episodes", ""]
    if not shown:
        return lines + [f"_No sample episodes: no {eval_set(run['header'])} evaluation recorded them yet._"]
    return lines + [
        f"{len(shown)} episodes of the final {eval_set(run['header'])} evaluation (step "
        f"{'n/a' if step is None else step}; greedy): the first of each verdict, then in task order, "
        "decoded as the model read and wrote them (special tokens left out; a long one cut in the "
        "middle). TensorBoard's Text tab has every evaluation's (`eval/sample_episodes`).",
        "",
        sample_episodes.markdown(shown, heading="###"),
    ]
