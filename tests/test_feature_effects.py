"""Loop-level tests that only a feature's effect can pass (issue #27): each trains one step of the
default run at smoke size and compares the first learner step's metrics with a run that differs
in one setting. Both runs see the same first batch (same seed, virtual clock, the slot engine), so
any difference in the loss or the gradient comes from the setting alone; a mask that is reported
but not applied, a parameter that is ignored or a weight forced to 1 leaves them equal and fails.

The sampler is int4 fake-quantised (``sampler.quantize_bits=4``): its log-probs differ from the
learner's by tens of percent, so every filter, clip and importance weight has tokens to act on.
The smoke policy passes no task, so every verdict reward is 0 and every advantage would be 0:
``_token_rewards`` gives each trajectory a reward that is a function of its own tokens (varied
within groups), the only part of the loop that is replaced. The mutations these tests kill are
listed in ``tests/mutations/catalogue.py`` (``docs/mutations.md`` records the last run).
"""

import json
import math
import os

import pytest

from agentjax.run import loop
from agentjax.run import loopparts as loopparts
from tests.runs import tiny_config

pytestmark = pytest.mark.slow  # each test trains (the memoised runs are shared within the module)

BASE = dict(
    loss__filter="none",
    loss__filter_ratio="mismatch",  # the filters compare the two engines at the same parameters
    model__exact_tile=0,
    sampler__quantize_bits=4,
    scheduler__engine_slots=8,  # the slot engine (users' path), on the virtual clock: deterministic
)


def _token_rewards(run, trajs):
    return [float(t.num_action_tokens % 3) for t in trajs]


@pytest.fixture(scope="module")
def first_step(tmp_path_factory):
    """``first_step(config="default", **overrides)``: the first learner step's metrics row of a
    one-step run (memoised: runs with the same settings are trained once per module)."""
    seen = {}

    def run(config="default", **overrides):
        key = (config, tuple(sorted(overrides.items())))
        if key not in seen:
            cfg = tiny_config(config, steps=1, **{**BASE, **overrides})
            workdir = tmp_path_factory.mktemp(config)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(loopparts, "batch_rewards", _token_rewards)
                loop.train(cfg, str(workdir), log=lambda s: None)
            rows = [json.loads(ln) for ln in open(os.path.join(workdir, "metrics.jsonl")) if ln.strip()]
            seen[key] = next(r for r in rows if "loss/total" in r)
        return seen[key]

    return run


def _differ(a, b, key="loss/total", rel=1e-4):
    return abs(a[key] - b[key]) > rel * max(abs(a[key]), abs(b[key]), 1e-12)


def _same(a, b, key="loss/total", rel=1e-6):
    return math.isclose(a[key], b[key], rel_tol=rel, abs_tol=1e-9)


def test_the_base_batch_has_a_signal(first_step):
    base = first_step()
    assert base["grad_norm"] > 0 and base["loss/total"] != 0  # varied rewards: advantages != 0


@pytest.mark.parametrize("name", ["icepop", "kpop"])
def test_a_consistency_filter_masks_by_its_parameter_and_the_mask_reaches_the_loss(first_step, name):
    base = first_step()
    tight = dict(
        icepop=dict(loss__icepop_low=0.95, loss__icepop_high=1.05), kpop=dict(loss__kpop_threshold=1e-7)
    )
    wide = dict(icepop=dict(loss__icepop_low=0.0, loss__icepop_high=1e9), kpop=dict(loss__kpop_threshold=1e9))
    t = first_step(loss__filter=name, **tight[name])
    w = first_step(loss__filter=name, **wide[name])
    assert 0 < t[f"masked/filter_{name}"] < 1, t[f"masked/filter_{name}"]  # its parameter
    assert w[f"masked/filter_{name}"] == 0.0
    assert _differ(t, base) and _differ(t, base, "grad_norm")  # the mask is applied to the loss
    assert _same(w, base) and _same(w, base, "grad_norm")  # ... and nothing else changed


def test_truncated_is_weights_the_advantages_and_truncates_at_its_cap(first_step):
    base = first_step()
    low = first_step(loss__tis_cap=1.0)
    high = first_step(loss__tis_cap=1e9)
    assert 0 < low["tis/truncated"] < 1 and high["tis/truncated"] == 0.0
    assert high["tis/weight_mean"] != 1.0
    assert _differ(high, base) and _differ(low, high)  # the weight is applied, the cap honoured


_OWN = [  # (loss, tight settings, wide settings, the metric its tight setting moves)
    ("gspo", dict(clip_low=1e-6, clip_high=1e-6), dict(clip_low=0.99, clip_high=100.0), "loss/clip_fraction"),
    ("cispo", dict(clip_high=1e-3), dict(clip_high=100.0), "loss/clip_fraction"),
    ("ppo", dict(clip_low=1e-3, clip_high=1e-3), dict(clip_low=0.99, clip_high=100.0), "loss/clip_fraction"),
    ("grpo", dict(clip_low=1e-3, clip_high=1e-3), dict(clip_low=0.99, clip_high=100.0), "loss/clip_fraction"),
    (
        "mis_po",
        dict(token_bounds=(0.95, 1.05)),
        dict(token_bounds=(0.0, 1e9), seq_bounds=(0.0, 1e9)),
        "loss/masked/token_ratio",
    ),
    (
        "hispo",
        dict(mismatch_bounds=(0.95, 1.05)),
        dict(mismatch_bounds=(0.0, 1e9)),
        "loss/masked/token_mismatch",
    ),
]


@pytest.mark.parametrize(("name", "tight", "wide", "metric"), [pytest.param(*c, id=c[0]) for c in _OWN])
def test_a_loss_honours_its_own_clip_or_bounds_in_the_loop(first_step, name, tight, wide, metric):
    t = first_step(loss__name=name, **{f"loss__{name}__{k}": v for k, v in tight.items()})
    w = first_step(loss__name=name, **{f"loss__{name}__{k}": v for k, v in wide.items()})
    assert t[metric] > 0 and w[metric] == 0.0, (t[metric], w[metric])
    assert _differ(t, w) and _differ(t, w, "grad_norm")


def test_cispo_keeps_the_gradient_of_clipped_tokens(first_step):
    cispo = first_step(loss__name="cispo", loss__cispo__clip_high=1e-3)
    assert cispo["loss/clip_fraction"] > 0 and cispo["grad_norm"] > 0  # CISPO: clipped, not dropped


def test_decoupled_ppo_weights_by_the_behaviour_ratio(first_step):
    """One update a step: the proximal policy is the current one, so decoupled PPO's objective is
    ``w A`` with ``w = pi_prox / mu``: PPO's value where PPO clips nothing. A behaviour weight
    forced to 1 gives the plain advantage mean instead."""
    wide = dict(loss__ppo__clip_low=0.99, loss__ppo__clip_high=100.0)
    ppo = first_step(loss__name="ppo", **wide)
    dec = first_step(loss__name="decoupled_ppo")
    assert dec["loss/behavior_weight/mean"] != 1.0
    assert math.isclose(dec["loss/total"], ppo["loss/total"], rel_tol=1e-4), (
        dec["loss/total"],
        ppo["loss/total"],
    )
    capped = first_step(loss__name="decoupled_ppo", loss__decoupled_ppo__behavior_cap=1.0)
    assert capped["loss/masked/behavior_cap"] > 0 and _differ(capped, dec)


def test_ess_falls_below_one_with_a_mismatched_sampler_and_is_one_without(first_step):
    mismatched = first_step(loss__filter="icepop", loss__icepop_low=0.0, loss__icepop_high=1e9)
    exact = first_step(sampler__quantize_bits=0, model__exact_tile=8, loss__filter="icepop")
    assert 0.0 < mismatched["ess/token_frac"] < 1.0
    assert exact["ess/token_frac"] == 1.0 and exact["mismatch/max_abs_delta"] == 0.0


def test_sampler_precision_settings_each_change_the_mismatch(first_step):
    """The sampler's head dtype and quantisation reach the sampler: each changes the measured
    mismatch (int4 > int8; a float32 head under a bf16 body differs from a bf16 head)."""
    f = dict(loss__filter="icepop", loss__icepop_low=0.0, loss__icepop_high=1e9, sampler__quantize_bits=0)
    int4 = first_step(loss__filter="icepop", loss__icepop_low=0.0, loss__icepop_high=1e9)
    int8 = first_step(**{**f, "sampler__quantize_bits": 8})
    bf16_head = first_step(**f, sampler__compute_dtype="bfloat16", sampler__head_dtype="bfloat16")
    f32_head = first_step(**f, sampler__compute_dtype="bfloat16", sampler__head_dtype="float32")
    d = "mismatch/max_abs_delta"
    assert int4[d] > int8[d] > 0 and bf16_head[d] > 0 and f32_head[d] > 0
    assert bf16_head[d] != f32_head[d]
