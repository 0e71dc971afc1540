"""The run report from hand-written workdirs (no training): files, key numbers, graceful gaps."""

import json
import os

from agentjax import report
from configs import default, smoke

PNGS = ("curves.png", "labels.png", "staleness.png", "delta.png", "masked.png", "classes.png")
HEADER = {
    "demonstrator_success": 0.5625,
    "warm_start/nll_first": 4.92,
    "warm_start/nll_last": 0.467,
    "warm_start/demo_train_success": 0.634,
    "rl_start_success": 0.40625,
}


def _eval(step, success, h=0.125, hack=0.25):
    return {
        "step": step,
        "eval/success": success,
        "eval/success_lo": success - 0.1,
        "eval/success_hi": success + 0.1,
        "eval/n": 64.0,
        "eval/mean_turns": 4.0,
        "eval/label/pass": success,
        "eval/label/fail": 1.0 - success - 0.0625,
        "eval/label/reward_hack": 0.03125,
        "eval/label/agent_timeout": 0.03125,
        "eval/audit/H": h,
        "eval/audit/H_lo": 0.01,
        "eval/audit/H_hi": 0.4,
        "eval/hack/rate": hack,
        "eval/hack/rate_lo": 0.05,
        "eval/hack/rate_hi": 0.6,
    }


def _train(step):
    return {
        "step": step,
        "loss/total": -0.1,
        "loss/loss": -0.1,
        "loss/ratio/mean": 1.0 + 0.01 * step,
        "loss/ratio/max": 1.5 + step,
        "loss/approx_kl": 0.001,
        "loss/clip_fraction": 0.02,
        "masked/filter_icepop": 0.05 * step,
        "ess/token_frac": 0.9,
        "grad_norm": 1.0,
        "skipped_nonfinite": float(step == 2),
        "skipped_empty": float(step == 3),
        "batch/reward_mean": 0.1 * step,
        "batch/rows": 8.0,
        "batch/groups": 4.0,
        "batch/all_same_groups": 1.0,
        "labels": {"pass": step, "fail": 8 - step - 1, "infra_fault": 1},
        "classes": {"short": 6, "long": 2},
        "version_gap_mean": 0.5,
        "version_gap_max": 1,
        "weights_mean": 1.0,
        "virtual_time": 10.0 * step,
        "wall": 3.0 * step,
    }


SUMMARY = {
    "header": HEADER,
    "final_eval": _eval(4, 0.8125, h=0.0625, hack=0.1875),
    "scheduler": {
        "steps": 4,
        "elapsed": 40.0,
        "consumed": 32,
        "throughput": 0.8,
        "slot_utilisation": 0.75,
        "duration": {"p50": 3.0, "p95": 9.0, "p99": 11.0},
        "terminal": {
            "submitted": 40,
            "cancelled": 2,
            "masked": 4,
            "rejected_stale": 2,
            "trained": 32,
            "cancellation_rate": 0.05,
            "rejection_rate": 0.05,
        },
        "class_shares": {
            "long": {"submitted": 0.3, "admitted": 0.25, "deviation_pp": -5.0},
            "short": {"submitted": 0.7, "admitted": 0.75, "deviation_pp": 5.0},
        },
        "max_share_deviation_pp": 5.0,
        "long_task_drop_rate": 0.125,
        "max_version_gap": 9,
        "mean_generation_gap": 0.25,
        "mean_queue_gap": 0.5,
        "version_gap_hist": [20, 8, 2, 1, 0, 0, 0, 1],
        "ess_fraction": 0.97,
    },
    "cost_ledger": {
        "device_seconds": {
            "generation": 64.0,
            "environment": 0.0,
            "verification": 0.0,
            "training": 8.0,
            "retry_waste": 16.0,
        },
        "cpu_seconds": {
            "generation": 0.0,
            "environment": 12.5,
            "verification": 0.0,
            "training": 0.0,
            "retry_waste": 3.5,
        },
    },
    "weight_sync": {"syncs": 4, "skipped": 0, "bytes": 3 * 2**20, "seconds": 0.25},
    "wall_seconds": 123.0,
}


def _workdir(path, rows, summary=None, config=None):
    """A workdir as a run leaves it; ``config``: its ``run_config.json`` (the config it started with)."""
    os.makedirs(path, exist_ok=True)
    if config is not None:
        with open(os.path.join(path, "run_config.json"), "w") as f:
            json.dump(config.to_dict(), f)
    with open(os.path.join(path, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    if summary is not None:
        with open(os.path.join(path, "summary.json"), "w") as f:
            json.dump(summary, f)
    return str(path)


SAMPLES = [
    {
        "task_id": "t3",
        "label": "pass",
        "reward": 1.0,
        "stop": "finished",
        "text": "[prompt] fix f\n[action 1] submit",
    },
    {"task_id": "t5", "label": "fail", "reward": 0.0, "stop": "task_cap", "text": "[prompt] fix g"},
]


def _full(tmp_path, summary=None, config=None, header=None):
    """A finished run's workdir; its config the default run's unless given."""
    rows = [
        {"step": 0, "header": HEADER if header is None else header, **_eval(0, 0.40625)},
        _train(1),
        _train(2),
        _eval(2, 0.625),
        _train(3),
        _train(4),
        {**_eval(4, 0.8125, h=0.0625, hack=0.1875), "eval/samples": SAMPLES},
    ]
    config = default.get_config() if config is None else config
    return _workdir(tmp_path / "run", rows, SUMMARY if summary is None else summary, config)


CONSISTENCY = {
    "models": {
        "dense": {
            "modes": [
                {
                    "mode": "exact f32",
                    "logp": {
                        "all": {"n": 96, "frac_zero": 1.0, "mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
                    },
                }
            ]
        }
    }
}


def test_full_report_has_every_plot_and_the_key_numbers(tmp_path):
    wd = _full(tmp_path)
    with open(os.path.join(wd, "consistency.json"), "w") as f:  # as launch.consistency writes it
        json.dump(CONSISTENCY, f)
    path = report.write_report(wd)
    out = os.path.dirname(path)
    assert path == os.path.join(str(tmp_path), "run", "report", "report.md")
    for name in (*PNGS, "cost.png"):
        with open(os.path.join(out, name), "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n", name
        assert f"]({name})" in open(path).read()
    md = open(path).read()
    assert "81.2% [71.2%, 91.2%] on 64 tasks, step 4" in md  # final held-out success and CI
    assert "| scripted demonstrator success | 56.2% |" in md
    assert "| warm start = RL start success | 40.6% |" in md
    assert "4.920 -> 0.467" in md
    assert "0.062 [0.010, 0.400]" in md  # H of the final eval
    assert "0.188 [0.050, 0.600]" in md  # hack rate of the final eval
    # targets: 81.25 >= 70; +40.6 pts over RL start; +25.0 pts over the demonstrator
    assert (
        "success 81.2 pts vs >= 70 (met); gain over rl start 40.6 pts vs >= 25 (met); "
        "margin over demonstrator 25.0 pts vs >= 20 (met)" in md
    )
    # masked: filter_icepop over steps 1..4 = 0.05 k -> mean 0.125, max 0.2; 1 of 4 groups all-same
    assert "| masked/filter_icepop | 0.1250 | 0.2000 | 0.2000 |" in md
    assert "| masked/zero_advantage_groups | 0.2500 | 0.2500 | 0.2500 |" in md
    assert "| masked | 4 | 10.0% |" in md and "| rejected_stale | 2 | 5.0% |" in md
    assert "Steps skipped for non-finite gradients: 1. Steps with no signal" in md
    assert "(gradient exactly zero, no optimiser step): 1." in md
    # delta: ratio mean 1.01..1.04 -> mean 1.025, max 1.04
    assert "| loss/ratio/mean | 1.0250 | 1.0400 | 1.0400 |" in md
    # labels over 4 batches: pass 1+2+3+4 = 10 of 32; one infra fault per batch
    assert "| pass | pass | 10 | 31.2% |" in md and "| infra_fault | infra | 4 | 12.5% |" in md
    assert "[20, 8, 2, 1, 0, 0, 0, 1]" in md and "97.0%" in md
    assert "| long | 30.0% | 25.0% | -5.0 |" in md and "long-task drop rate 12.5%" in md
    # cost: 64 device-s generation over 32 trained -> 2 per trajectory; totals 88 and 16
    assert "| generation | 64.00 | 0.00 | 2.0000 | 0.0000 |" in md
    assert "| retry_waste | 16.00 | 3.50 | 0.5000 | 0.1094 |" in md
    assert "| total | 88.00 | 16.00 | 2.7500 | 0.5000 |" in md
    assert "4 syncs (0 skipped), 3.0 MiB" in md
    assert "note:" not in md
    assert "| exact f32 | 96 | 0.0000 | 0.0000 | 0.0000 | 0.0000 | 1.0000 |" in md
    assert "Slot engine" not in md and "Real-time clock" not in md  # neither ran


def test_report_shows_the_slot_engine_and_the_real_time_overlap(tmp_path):
    engine = {
        "slots": 8,
        "tokens_per_s": 123.4,
        "slot_occupancy": 0.75,
        "slot_held_waiting": 0.125,
        "env_pool": {"utilisation": 0.5, "in_flight_measured": 2.0, "in_flight_littles_law": 2.0},
    }
    realtime = {"sampler_busy_s": 10.0, "learner_busy_s": 8.0, "overlap_s": 4.0, "wall_s": 15.0}
    wd = _full(tmp_path, {**SUMMARY, "engine": engine, "realtime": realtime})
    md = open(report.write_report(wd)).read()
    assert "Slot engine (8 slots): 123.4 generated tokens/s, slot occupancy 75.0%" in md
    assert "env pool utilisation 50.0%" in md
    assert "sampler busy 10.0 s, learner busy 8.0 s, both at once 4.0 s of 15.0 s" in md


def test_header_only_run_degrades_with_notes(tmp_path):
    wd = _workdir(tmp_path / "early", [{"step": 0, "header": HEADER, **_eval(0, 0.40625)}])
    md = open(report.write_report(wd, targets=default.TARGETS)).read()
    assert "no summary.json" in md
    assert "_No training steps yet._" in md
    assert "No cost ledger in summary.json" in md
    assert "success 40.6 pts vs >= 70 (NOT met); gain over rl start 0.0 pts vs >= 25 (NOT met)" in md
    assert "40.6% [30.6%, 50.6%] on 64 tasks, step 0" in md  # the last eval row stands in
    assert "_No sample episodes: no held-out evaluation recorded them yet._" in md
    for name in PNGS:
        assert os.path.getsize(os.path.join(wd, "report", name)) > 0


def test_no_eval_no_delta_stats_and_a_torn_line(tmp_path):
    row = {k: v for k, v in _train(1).items() if "ratio" not in k and k != "loss/clip_fraction"}
    row.pop("loss/approx_kl")
    wd = _workdir(tmp_path / "torn", [row])
    with open(os.path.join(wd, "metrics.jsonl"), "a") as f:
        f.write('{"step": 2, "loss/to')  # a crash mid-write
    md = open(report.write_report(wd)).read()
    assert "line 2 is not JSON" in md
    assert "_No held-out evaluation rows yet._" in md and "n/a (no eval yet)" in md
    assert "_No ratio metrics in training rows._" in md
    assert "comes from `python -m launch.consistency`" in md
    assert "| masked/filter_icepop | 0.0500 |" in md
    assert "| short | n/a | 75.0% | n/a |" in md  # admitted shares from the training rows


def test_without_matplotlib_the_tables_remain(tmp_path, monkeypatch):
    from agentjax.report import common

    monkeypatch.setattr(common, "Figure", None)
    monkeypatch.setattr(common, "MaxNLocator", None)
    path = report.write_report(_full(tmp_path))
    md = open(path).read()
    assert md.count("not drawn: matplotlib is not installed") == 7
    assert not [p for p in os.listdir(os.path.dirname(path)) if p.endswith(".png")]
    assert "| total | 88.00 | 16.00 | 2.7500 | 0.5000 |" in md and "| masked/filter_icepop | 0.1250 |" in md


def test_verdict_labels_map_to_their_report_groups():
    got = [
        report.label_group(x)
        for x in ("pass", "fail", "reward_hack", "agent_oom", "agent_error", "infra_fault", "None")
    ]
    assert got == ["pass", "fail", "hack", "agent", "agent", "infra", "other"]


def test_the_headline_takes_the_final_evals_step_from_its_metrics_row(tmp_path):
    """summary.json's final_eval holds the figures without their step (as system.train writes it)."""
    final = {k: v for k, v in _eval(4, 0.8125).items() if k != "step"}
    md = open(report.write_report(_full(tmp_path, {**SUMMARY, "final_eval": final}))).read()
    assert "on 64 tasks, step 4" in md and "step n/a" not in md


def test_a_ratio_axis_has_distinct_tick_labels_near_one_and_across_decades():
    from matplotlib.figure import Figure

    from agentjax.report.common import _ratio_axis

    for ys, scale in (([1.0001, 1.0004, 0.9998], "linear"), ([0.05, 1.0, 3.0], "log")):
        ax = Figure().subplots()
        ax.plot([1, 2, 3], ys)
        _ratio_axis(ax)
        ax.figure.canvas.draw()
        labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
        assert ax.get_yscale() == scale and len(labels) == len(set(labels)) > 1, labels


def test_the_targets_section_only_where_the_run_declares_targets(tmp_path):
    """The default run's config declares the learning targets; a config built on it (smoke) or
    an explicit ``targets={}`` declares none, and its report checks none."""
    assert report.load(_full(tmp_path / "d"))["targets"] == default.TARGETS
    for wd, targets in (
        (_full(tmp_path / "s", config=smoke.get_config()), None),
        (_full(tmp_path / "e"), {}),
    ):
        md = open(report.write_report(wd, targets=targets)).read()
        assert "Learning targets" not in md and "vs >= 70" not in md
        assert "81.2% [71.2%, 91.2%] on 64 tasks, step 4" in md  # the rest of the headline stays
    md = open(report.write_report(_full(tmp_path / "o"), targets={"success": 0.9})).read()
    assert "this eval: 64 held-out tasks): success 81.2 pts vs >= 90 (NOT met)" in md
    assert "gain over rl start" not in md  # only what the run declares


def test_the_report_shows_the_final_evals_sample_episodes(tmp_path):
    md = open(report.write_report(_full(tmp_path))).read()
    section = md[md.index("## Sample episodes") :]
    assert "2 episodes of the final held-out evaluation (step 4" in section
    assert "### episode 1: task `t3`, verdict **pass**, reward 1, stop `finished`" in section
    assert "```\n[prompt] fix f\n[action 1] submit\n```" in section
    assert "### episode 2: task `t5`, verdict **fail**, reward 0, stop `task_cap`" in section
    assert section.index("episode 2") < section.index("## Staleness")


def test_every_section_names_the_set_the_run_evaluates(tmp_path):
    """A suite that evaluates another set than held-out (its ``eval_set``, e.g. codefix's
    ``eval_pairs='train'``) is named so in the headline, the curves, the labels and the episodes;
    nothing calls it held-out."""
    what = "training-pair (in-distribution)"
    header = {**HEADER, "eval_set": what}
    md = open(report.write_report(_full(tmp_path, {**SUMMARY, "header": header}, header=header))).read()
    assert f"final {what} success (greedy)" in md
    assert f"## Reward and {what} success" in md
    assert f"2 episodes of the final {what} evaluation (step 4" in md
    assert "held-out" not in md[md.index("## Headline") : md.index("## Staleness")]
