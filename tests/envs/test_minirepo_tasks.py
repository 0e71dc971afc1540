"""minirepo generation: determinism, disjoint splits, validated fixes, the difficulty knob."""

import dataclasses

import pytest

from agentjax.envs.minirepo import DEFAULT, EASY, HARD, generate, lang, split_of, tasks, verifier, vocabulary
from agentjax.envs.minirepo.lang import Edit, Fn
from agentjax.envs.protocol import Label

N = 1000  # tasks per split in the "thousands of tasks" checks


@pytest.fixture(scope="module")
def train():
    return [generate(s, "train") for s in range(N)]


@pytest.fixture(scope="module")
def heldout():
    return [generate(s, "heldout") for s in range(N)]


def test_interpreter_hand_computed():
    prog = (Fn("g", "f", "*", 2), Fn("f", "x", "-", 3), Fn("h", "x", "+", 1))
    assert lang.evaluate(prog, "g", 2) == (2 - 3) * 2 == -2
    assert lang.evaluate(prog, "f", 10) == 7
    assert lang.affine(prog)["g"] == (2, -6)
    assert lang.line(prog[0]) == "g x = f x * 2" and lang.line(prog[1]) == "f x = x - 3"
    assert [lang.parse_line(lang.line(fn)) for fn in prog] == list(prog)
    assert lang.canonical(prog) == "f0 x = f1 * 2 ; f1 x = x - 3 ; f2 x = x + 1"
    assert lang.ancestors(prog, "f") == {"g"} and lang.chain_length(prog, "g") == 2
    fixed = lang.apply_edit(prog, Edit("f", "op", "+"))
    assert lang.evaluate(fixed, "g", 2) == 10 and prog[1].op == "-"  # input not mutated
    assert lang.num_word(41) == "huge" and lang.num_word(-41) == "-huge" and lang.num_word(40) == "40"


def test_generation_is_deterministic_per_seed():
    fresh = generate.__wrapped__  # bypass the memo: two independent generations
    for d in (EASY, DEFAULT, HARD):
        a, b = fresh(7, "train", d), fresh(7, "train", d)
        assert a == b and a is not b and a.fingerprint == b.fingerprint
    assert generate(7, "train") != generate(8, "train")
    assert generate(7, "train").program != generate(7, "train", EASY).program


def test_splits_are_disjoint_by_program_up_to_renaming(train, heldout):
    assert all(t.split == "train" and split_of(t.program) == "train" for t in train)
    assert all(t.split == "heldout" and split_of(t.program) == "heldout" for t in heldout)
    canon_train = {t.canonical for t in train}
    canon_held = {t.canonical for t in heldout}
    assert not canon_train & canon_held
    assert not {lang.source(t.program) for t in train} & {lang.source(t.program) for t in heldout}
    assert len(canon_held) > 0.9 * N  # the held-out set is not a handful of repeated programs
    with pytest.raises(ValueError, match="split"):
        generate(0, "test")


def test_reference_passes_and_bad_fix_fails(train, heldout):
    for t in train + heldout:
        ref = verifier.verify(t, verifier.with_edit(t, t.reference))
        bad = verifier.verify(t, verifier.with_edit(t, t.bad_fix))
        untouched = verifier.verify(t, verifier.pristine(t))
        assert ref.label is Label.PASS and ref.reward == 1.0, t.task_id
        assert verifier.audit(t, verifier.with_edit(t, t.reference)).label is Label.PASS
        assert bad.label is Label.FAIL and bad.reward == 0.0, t.task_id
        assert untouched.label is Label.FAIL
        assert tasks.failing(t.program, t.visible_tests)  # the bug shows in the visible tests


def test_visible_tests_pin_down_the_fix(train):
    for t in train[:300]:
        assert tasks.visible_fixes(t.program, t.visible_tests) == [t.reference]


def test_hidden_tests_use_other_inputs_than_visible(train):
    for t in train[:300]:
        visible = {(v.name, v.x) for v in t.visible_tests}
        assert not visible & {(h.name, h.x) for h in t.hidden_tests}
        assert len(t.hidden_tests) == 2 * len(t.names)
        assert len(t.audit_tests) > len(t.hidden_tests)


def test_default_bug_is_a_sign_flip_and_task_classes(heldout):
    for t in heldout:
        bug = lang.as_dict(t.program)[t.bug]
        assert t.bug_kind == "sign" and t.reference == Edit(t.bug, "op", "+" if bug.op == "-" else "-")
        first_failing = tasks.failing(t.program, t.visible_tests)[0].name
        assert (t.task_class == "easy") == (first_failing == t.bug)
    hard = sum(t.task_class == "hard" for t in heldout) / len(heldout)
    assert 0.3 < hard < 0.6  # the bug often hides behind a caller


def test_difficulty_knob_changes_the_tasks():
    easy = [generate(s, "train", EASY) for s in range(200)]
    hard = [generate(s, "train", HARD) for s in range(200)]
    assert all(len(t.names) == 2 for t in easy) and all(len(t.names) == 5 for t in hard)
    assert {t.bug_kind for t in hard} == {"sign", "op", "const"}
    assert any(len(t.visible_tests) < len(t.names) for t in hard)  # untested helpers
    depth = lambda ts: max(lang.chain_length(t.program, n) for t in ts for n in t.names)
    assert depth(easy) <= 2 < depth(hard) <= 4
    wide = dataclasses.replace(DEFAULT, name="wide", const_max=9)
    assert max(fn.k for s in range(200) for fn in generate(s, "train", wide).program) > 5


def test_task_text_is_in_the_vocabulary(train):
    vocab = set(vocabulary())
    assert vocabulary() == sorted(vocab) and len(vocab) < 200
    for t in train[:300]:
        for fn in t.program:
            assert set(lang.line(fn).split()) <= vocab
        for v in t.visible_tests:
            assert {str(v.x), str(v.expect)} <= vocab


def test_fingerprint_tracks_the_spec():
    t = generate(3, "train")
    assert t.fingerprint != dataclasses.replace(t, bug_kind="other").fingerprint
    assert verifier.verify(t, verifier.pristine(t)).env_fingerprint == t.fingerprint


def test_invalid_difficulty_fails_with_the_field_name():
    with pytest.raises(ValueError, match="n_functions"):
        tasks.Difficulty(n_functions=11)
    with pytest.raises(ValueError, match="bug_kinds"):
        tasks.Difficulty(bug_kinds=("typo",))
    with pytest.raises(ValueError, match="visible_inputs"):
        tasks.Difficulty(visible_inputs=(0, 1))
    with pytest.raises(ValueError, match="hack_prob"):
        tasks.Difficulty(hack_prob=1.5)
    tweaked = dataclasses.replace(DEFAULT, hack_prob=1.0)  # same name, other knobs: other ids
    assert generate(0, "train", tweaked).task_id != generate(0, "train").task_id
