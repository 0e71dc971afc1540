"""The report's sections on how the system ran: staleness, train/inference mismatch (consistency
and the delta plot), masked tokens, per-class shares and the cost ledger. Each returns its
markdown lines and draws its PNGs (if matplotlib is there)."""

from __future__ import annotations

import json
import os

from agentjax.report.common import (
    _f,
    _figure,
    _ledger,
    _pct,
    _ratio_axis,
    _save,
    _series,
    _steps,
)


def staleness(run: dict, out: str) -> list[str]:
    """Version-gap histogram (consume - behaviour version) and ESS of the staleness weights."""
    sch = run["summary"].get("scheduler", {})
    hist = sch.get("version_gap_hist")
    fig = _figure(10)
    a, b = fig.subplots(1, 2)
    if hist:
        a.bar([str(i) for i in range(len(hist) - 1)] + [f">={len(hist) - 1}"], hist)
    else:
        a.plot(*_series(run["train"], "version_gap_mean"), ".-", label="mean gap per batch")
        a.plot(*_series(run["train"], "version_gap_max"), "x", label="max gap per batch")
        a.legend(fontsize=7)
    if hist:
        a.set(xlabel="version gap", title="version gap of trained trajectories")
    else:
        _steps(a, title="version gap per batch")
    b.plot(*_series(run["train"], "ess/token_frac"), ".-", label="token ESS / tokens (ratio weights)")
    b.plot(*_series(run["train"], "weights_mean"), "x-", label="mean staleness weight")
    _steps(b, ylim=(0, 1.05), title="ESS")
    b.legend(fontsize=7)
    ess = _series(run["train"], "ess/token_frac")[1]
    lines = ["## Staleness: version gap and ESS", "", _save(fig, out, "staleness.png"), ""]
    if hist:
        lines.append(
            f"Version-gap counts of trained trajectories (last bin open): {hist}; max gap "
            f"{sch.get('max_version_gap')}, mean generation gap "
            f"{_f(sch.get('mean_generation_gap'), 2)}, "
            f"mean queue gap {_f(sch.get('mean_queue_gap'), 2)}."
        )
    else:
        lines.append("_No version-gap histogram (summary.json missing); per-batch gaps shown instead._")
    lines.append(
        f"\nESS: sequence-level staleness weights {_pct(sch.get('ess_fraction'))} of N; token-level "
        f"ratio weights mean {_pct(sum(ess) / len(ess)) if ess else 'n/a'}, min "
        f"{_pct(min(ess)) if ess else 'n/a'} over steps."
    )
    return lines


def _stats_table(keys: list[str], rows: list[dict], what: str) -> list[str]:
    lines = [f"| {what} | mean over steps | max over steps | last |", "|---|---|---|---|"]
    for k in keys:
        v = _series(rows, k)[1]
        if v:
            lines.append(f"| {k} | {_f(sum(v) / len(v), 4)} | {_f(max(v), 4)} | {_f(v[-1], 4)} |")
    return lines


def _consistency(run: dict, workdir: str) -> list[str]:
    cons = run["summary"].get("consistency")
    path = os.path.join(workdir, "consistency.json")
    if cons is None and os.path.exists(path):
        with open(path) as f:
            cons = json.load(f)
    if not cons:
        return [
            "The full per-token delta report (mean/p50/p99/max |delta|, share exactly 0, by position, "
            "probability and expert, per sampler/learner mode) comes from `python -m launch.consistency` "
            "(write it to `<workdir>/consistency.json` to have it included here)."
        ]
    modes = [m for v in cons.get("models", {}).values() for m in v.get("modes", [])]
    modes = modes or [{"mode": "run", **cons}]
    lines = ["| mode | tokens | mean abs delta | p50 | p99 | max | frac == 0 |", "|---" * 7 + "|"]
    for m in modes:
        a = m.get("logp", m).get("all", {})
        lines.append(
            f"| {m.get('mode')} | {a.get('n')} | {_f(a.get('mean'), 4)} | {_f(a.get('p50'), 4)} | "
            f"{_f(a.get('p99'), 4)} | {_f(a.get('max'), 4)} | {_f(a.get('frac_zero'), 4)} |"
        )
    return lines


def delta(run: dict, out: str, workdir: str) -> list[str]:
    """Train/inference ratio statistics per step (and the full delta report when present)."""
    keys = sorted(
        {k for r in run["train"] for k in r if "ratio/" in k or k in ("loss/approx_kl", "loss/clip_fraction")}
    )
    fig = _figure(10)
    axes = fig.subplots(1, 2)
    for k in keys:
        axes[int("ratio/" not in k)].plot(*_series(run["train"], k), ".-", label=k)
    _steps(axes[0], title="r = pi_train / mu_infer = exp(delta)")
    _ratio_axis(axes[0])
    _steps(axes[1], title="approx. KL(mu || pi) and clipped share")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    lines = ["## Delta statistics", "", _save(fig, out, "delta.png"), ""]
    lines += _stats_table(keys, run["train"], "metric") if keys else ["_No ratio metrics in training rows._"]
    return lines + [""] + _consistency(run, workdir)


def masked(run: dict, out: str) -> list[str]:
    """Token shares masked per filter reason, zero-advantage groups, trajectory terminal states."""
    keys = sorted({k for r in run["train"] for k in r if "masked/" in k})
    # A group whose rewards are all equal has zero advantage: it trains nothing, like a mask.
    zero = {
        "masked/zero_advantage_groups": lambda r: (
            r.get("batch/all_same_groups", 0) / max(r.get("batch/groups", 1), 1)
        )
    }
    tr = [{**r, **{k: f(r) for k, f in zero.items()}} for r in run["train"]]
    keys += list(zero) if tr else []
    term = run["summary"].get("scheduler", {}).get("terminal", {})
    n = term.get("submitted", 0)
    reasons = {
        k: v / n
        for k, v in term.items()
        if n and k not in ("submitted", "trained") and not k.endswith("rate")
    }
    fig = _figure(10)
    a, b = fig.subplots(1, 2)
    for k in keys:
        a.plot(*_series(tr, k), ".-", label=k)
    _steps(a, title="masked share of tokens / groups")
    if keys:
        a.legend(fontsize=7)
    b.bar(list(reasons), list(reasons.values()))
    b.set(title="submissions by terminal state (not trained)")
    lines = ["## Masked fractions by reason", "", _save(fig, out, "masked.png"), ""]
    lines += _stats_table(keys, tr, "reason") if keys else ["_No training rows yet._"]
    if reasons:
        lines += ["", "| terminal state | submissions | share |", "|---|---|---|"]
        lines += [f"| {k} | {int(term[k])} | {_pct(v)} |" for k, v in reasons.items()]
    skipped = sum(r.get("skipped_nonfinite", 0) for r in tr)
    empty = sum(r.get("skipped_empty", 0) for r in tr)
    return lines + [
        "",
        f"Steps skipped for non-finite gradients: {int(skipped)}. "
        f"Steps with no signal (gradient exactly zero, no optimiser step): {int(empty)}.",
    ]


def classes(run: dict, out: str) -> list[str]:
    """Share of each task class among submitted and among admitted (trained) trajectories."""
    shares = run["summary"].get("scheduler", {}).get("class_shares")
    if not shares:
        counts: dict[str, float] = {}
        for r in run["train"]:
            for k, v in (r.get("classes") or {}).items():
                counts[k] = counts.get(k, 0) + v
        n = max(sum(counts.values()), 1)
        shares = {k: {"admitted": v / n} for k, v in sorted(counts.items())}
    fig = _figure(6)
    ax = fig.subplots()
    names = list(shares)
    for j, kind in enumerate(("submitted", "admitted")):
        ax.bar(
            [i + 0.4 * j for i in range(len(names))], [shares[c].get(kind, 0) for c in names], 0.4, label=kind
        )
    ax.set_xticks([i + 0.2 for i in range(len(names))], names)
    ax.set(title="task class share", ylim=(0, 1))
    ax.legend(fontsize=7)
    lines = [
        "## Admitted share per task class",
        "",
        _save(fig, out, "classes.png", left=0.12),
        "",
        "| class | submitted | admitted | deviation (pts) |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {c} | {_pct(v.get('submitted'))} | {_pct(v.get('admitted'))} | {_f(v.get('deviation_pp'), 1)} |"
        for c, v in shares.items()
    ]
    sch = run["summary"].get("scheduler", {})
    if sch.get("slowest_class"):
        lines.append(
            f"Fast-first bias: the slowest class `{sch['slowest_class']}` never trained "
            f"{_pct(sch['slowest_class_drop_rate'])} of its episodes."
        )
    if "long_task_drop_rate" in sch:
        lines.append(
            f"\nMax deviation {_f(sch.get('max_share_deviation_pp'), 1)} pts; long-task drop rate "
            f"{_pct(sch['long_task_drop_rate'])}."
        )
    return lines


def cost(run: dict, out: str) -> list[str]:
    """Cost ledger: device-seconds and CPU-seconds per item (different currencies), weight sync."""
    summary = run["summary"]
    led, sch, ws = _ledger(summary), summary.get("scheduler", {}), summary.get("weight_sync")
    lines = ["## Cost ledger", ""]
    if led:
        dev, cpu = led.get("device_seconds", {}), led.get("cpu_seconds", {})
        items = list(dict.fromkeys([*dev, *cpu]))
        fig = _figure(6)
        ax = fig.subplots()
        ax.barh(
            [f"{i} (device)" for i in items] + [f"{i} (CPU)" for i in items],
            [dev.get(i, 0) for i in items] + [cpu.get(i, 0) for i in items],
        )
        measured = "cost_ledger_virtual" in summary  # the real run's wall times (virtual: older runs)
        ax.set(
            xlabel="seconds (measured wall)" if measured else "seconds (virtual clock)", title="cost ledger"
        )
        n = max(sch.get("consumed", 0), 1)
        lines += [
            _save(fig, out, "cost.png", left=0.3),
            "",
            "| item | device-s | CPU-s | per trained trajectory: device-s | CPU-s |",
            "|---" * 5 + "|",
        ]
        rows = [(i, dev.get(i, 0), cpu.get(i, 0)) for i in items]
        rows.append(("total", sum(dev.values()), sum(cpu.values())))
        lines += [f"| {i} | {_f(d, 2)} | {_f(c, 2)} | {_f(d / n, 4)} | {_f(c / n, 4)} |" for i, d, c in rows]
    else:
        lines.append(
            "_No cost ledger in summary.json (`agentjax.diagnostics.metrics.cost_ledger` "
            "of the scheduler records)._"
        )
    if ws:
        lines.append(
            f"\nWeight sync: {ws.get('syncs')} syncs ({ws.get('skipped')} skipped), "
            f"{ws.get('bytes', 0) / 2**20:.1f} MiB, {_f(ws.get('seconds'), 2)} s."
        )
    if sch:
        d = sch.get("duration", {})
        lines.append(
            f"\nScheduler: {sch.get('steps')} steps, {sch.get('consumed')} trajectories consumed in "
            f"{_f(sch.get('elapsed'), 1)} virtual s ({_f(sch.get('throughput'), 2)} traj/s), slot "
            f"utilisation {_pct(sch.get('slot_utilisation'))}, rollout duration p50/p95/p99 "
            f"{_f(d.get('p50'), 1)}/{_f(d.get('p95'), 1)}/{_f(d.get('p99'), 1)} s."
        )
    pool = run["summary"].get("env_pool") or sch.get("env_pool")
    if pool:
        lines.append(
            "\nEnv pool (Little's law): predicted in flight "
            f"{_f(pool.get('predicted_in_flight'), 2)}, "
            f"measured {_f(pool.get('measured_in_flight'), 2)}."
        )
    eng, rt = summary.get("engine"), summary.get("realtime")
    if eng:
        ep = eng.get("env_pool", {})
        lines.append(
            f"\nSlot engine ({eng.get('slots')} slots): {_f(eng.get('tokens_per_s'), 1)} generated "
            f"tokens/s, slot occupancy {_pct(eng.get('slot_occupancy'))} (held waiting for an "
            f"environment {_pct(eng.get('slot_held_waiting'))}); env pool utilisation "
            f"{_pct(ep.get('utilisation'))}, in flight {_f(ep.get('in_flight_measured'), 2)} vs "
            f"Little's law {_f(ep.get('in_flight_littles_law'), 2)}."
        )
    if rt:
        lines.append(
            f"\nReal-time clock: sampler busy {_f(rt.get('sampler_busy_s'), 1)} s, learner busy "
            f"{_f(rt.get('learner_busy_s'), 1)} s, both at once {_f(rt.get('overlap_s'), 1)} s of "
            f"{_f(rt.get('wall_s'), 1)} s."
        )
    return lines
