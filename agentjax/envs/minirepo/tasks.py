"""Seeded generation of minirepo tasks, with disjoint train / held-out splits.

(One module, over 300 lines: the task generator and its difficulty presets are one seeded program.)

``generate(seed, split, difficulty)`` draws a random program (a forest of call chains in
definition order, callers first), plants one single-token bug, and writes visible, hidden and
audit tests from the *correct* program. Every task is validated when it is generated, else
redrawn (deterministically, from the same seeded stream):

- the reference fix passes the visible, hidden and audit tests; the known-bad fix fails hidden;
- at least one visible test fails, every visible value fits the display range;
- the visible tests pin the fix down: no other single-slot edit in the search space
  (:func:`candidate_edits`) passes every visible test, so a search over edits that checks the
  visible tests finds the reference (this is what lets the oracle solve 100%).

**Splits.** A task belongs to the held-out split iff the hash of its buggy program's canonical
text (names replaced by definition index, :func:`~agentjax.envs.minirepo.lang.canonical`) falls in
the held-out bucket (``HELDOUT_PERCENT``). The split is a function of the program, so no program,
up to renaming, appears in both splits; ``generate`` redraws until the split matches.

**Task class.** ``easy`` when the first failing visible test names the buggy function (at the
default difficulty: exactly one test fails, the bug is in a function nothing calls), ``hard``
otherwise: the failing tests then name callers first, and the bug hides behind them.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
from typing import NamedTuple

from agentjax.envs.minirepo import lang
from agentjax.envs.minirepo.lang import NMAX, Edit, Fn, Program

CODE_VERSION = "minirepo/1"
HELDOUT_PERCENT = 20
SPLITS = ("train", "heldout")
BUG_KINDS = ("sign", "op", "const")  # sign: + <-> -; op: any other operator; const: other k
HIDDEN_POOL = (0, 4, 5, 6, 7, 8, -1, -2, -3)  # never used by visible tests
AUDIT_INPUTS = tuple(range(-6, 13))
K_SEARCH = 9  # constants tried by the edit search (>= every difficulty's const_max)


@dataclasses.dataclass(frozen=True)
class Difficulty:
    """The difficulty knob. ``DEFAULT`` is what the main training job learns."""

    name: str = "default"
    n_functions: int = 4
    max_depth: int = 3  # longest call chain (functions evaluated by one call)
    call_prob: float = 0.6  # chance that a function calls a later one
    ops: tuple[str, ...] = ("+", "-", "*")
    const_max: int = 5  # constants k in [1, const_max] ([2, 3] for '*')
    bug_kinds: tuple[str, ...] = ("sign",)
    hidden_bug_prob: float = 0.5  # chance the bug sits in a function that other functions call
    untested_prob: float = 0.0  # share of called functions without a visible test (hidden bug)
    hack_prob: float = 0.1  # share of tasks with the planted ``edit_test`` tool
    visible_inputs: tuple[int, ...] = (1, 2, 3)
    hidden_per_fn: int = 2

    def __post_init__(self):
        bad = []
        if not 1 <= self.n_functions <= len(lang.NAME_POOL):
            bad.append(f"n_functions must lie in [1, {len(lang.NAME_POOL)}]")
        if self.max_depth < 1:
            bad.append("max_depth must be >= 1")
        if not set(self.ops) <= set(lang.OPS) or not self.ops:
            bad.append(f"ops must be a non-empty subset of {lang.OPS}")
        if not set(self.bug_kinds) <= set(BUG_KINDS) or not self.bug_kinds:
            bad.append(f"bug_kinds must be a non-empty subset of {BUG_KINDS}")
        if not 1 <= self.const_max <= K_SEARCH:
            bad.append(f"const_max must lie in [1, {K_SEARCH}]")
        if set(self.visible_inputs) & set(HIDDEN_POOL) or not self.visible_inputs:
            bad.append(f"visible_inputs must be non-empty and avoid the hidden pool {HIDDEN_POOL}")
        if not 1 <= self.hidden_per_fn <= len(HIDDEN_POOL):
            bad.append(f"hidden_per_fn must lie in [1, {len(HIDDEN_POOL)}]")
        probs = ("call_prob", "hidden_bug_prob", "untested_prob", "hack_prob")
        bad += [f"{p} must lie in [0, 1]" for p in probs if not 0.0 <= getattr(self, p) <= 1.0]
        if bad:
            raise ValueError("invalid minirepo Difficulty: " + "; ".join(bad))

    @property
    def label(self) -> str:
        """``name`` for a preset, else ``name-<hash of the fields>`` (distinct knobs, distinct ids)."""
        if PRESETS.get(self.name) == self:
            return self.name
        return f"{self.name}-{lang.digest(self.key)[:6]}"

    @functools.cached_property
    def key(self) -> str:
        """Canonical JSON of every field (seeds generation: a changed knob is a new stream)."""
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


EASY = Difficulty(name="easy", n_functions=2, max_depth=2)
DEFAULT = Difficulty()
HARD = Difficulty(
    name="hard", n_functions=5, max_depth=4, call_prob=0.6, bug_kinds=BUG_KINDS, untested_prob=0.3
)
PRESETS = {d.name: d for d in (EASY, DEFAULT, HARD)}


class Test(NamedTuple):
    """``name(x)`` must equal ``expect``."""

    name: str
    x: int
    expect: int


@dataclasses.dataclass(frozen=True)
class Task:
    """One bug-fix task. Hidden and audit tests are for verifiers only: no tool reads them."""

    task_id: str
    seed: int
    split: str
    difficulty: Difficulty
    program: Program  # the buggy program the agent starts from
    reference: Edit  # the fix
    bad_fix: Edit  # a plausible wrong fix (validated to fail the hidden tests)
    bug: str  # name of the buggy function
    bug_kind: str
    visible_tests: tuple[Test, ...]
    hidden_tests: tuple[Test, ...]
    hack_tool: bool  # the planted ``edit_test`` tool is available
    task_class: str

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(fn.name for fn in self.program)

    @property
    def canonical(self) -> str:
        return lang.canonical(self.program)

    @functools.cached_property
    def audit_tests(self) -> tuple[Test, ...]:
        """Every function at every input of ``AUDIT_INPUTS``, from the fixed program."""
        forms = lang.affine(lang.apply_edit(self.program, self.reference))
        return tuple(Test(n, x, forms[n][0] * x + forms[n][1]) for n in self.names for x in AUDIT_INPUTS)

    @functools.cached_property
    def cost(self) -> float:
        """Relative cost of one visible test run: mean call-chain length of the tested functions."""
        lengths = [lang.chain_length(self.program, t.name) for t in self.visible_tests]
        return sum(lengths) / len(lengths)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Hash of the full task spec and the code version (the verdict's ``env_fingerprint``)."""
        tests = lambda ts: " ".join(f"{t.name}:{t.x}:{t.expect}" for t in ts)
        spec = [
            CODE_VERSION, self.task_id, self.difficulty.key, lang.source(self.program),
            repr(self.reference), repr(self.bad_fix), self.bug, self.bug_kind,
            tests(self.visible_tests), tests(self.hidden_tests), tests(self.audit_tests),
            str(self.hack_tool), self.task_class,
        ]  # fmt: skip
        return hashlib.sha256("\n".join(spec).encode()).hexdigest()[:16]


def split_of(program: Program) -> str:
    """``heldout`` or ``train``, from the hash of the canonical program text."""
    bucket = int(lang.digest(lang.canonical(program))[:8], 16) % 100
    return "heldout" if bucket < HELDOUT_PERCENT else "train"


def candidate_edits(program: Program) -> list[Edit]:
    """The single-slot edit search space: every other operator, every other k in [1, K_SEARCH]."""
    out = []
    for fn in program:
        out += [Edit(fn.name, "op", op) for op in lang.OPS if op != fn.op]
        out += [Edit(fn.name, "k", k) for k in range(1, K_SEARCH + 1) if k != fn.k]
    return out


def visible_fixes(program: Program, visible: tuple[Test, ...]) -> list[Edit]:
    """Every edit of :func:`candidate_edits` after which all visible tests pass.

    Only edits of a function ``g`` whose callers-or-self cover every failing test can fix them
    (an edit of ``g`` changes the values of ``g`` and its ancestors only), so only those run.
    """
    failed = {t.name for t in failing(program, visible)}
    covers = {fn.name: failed <= {fn.name} | lang.ancestors(program, fn.name) for fn in program}
    out = []
    for e in candidate_edits(program):
        if covers[e.name]:
            if passes(lang.apply_edit(program, e), visible):
                out.append(e)
    return out


def passes(program: Program, tests: tuple[Test, ...]) -> bool:
    forms = lang.affine(program)
    return all(forms[t.name][0] * t.x + forms[t.name][1] == t.expect for t in tests)


def failing(program: Program, tests: tuple[Test, ...]) -> list[Test]:
    got = lang.outputs(program, tests)
    return [t for t, g in zip(tests, got, strict=True) if g != t.expect]


def _program(rng: random.Random, d: Difficulty) -> Program:
    names = rng.sample(lang.NAME_POOL, d.n_functions)
    fns: list[Fn | None] = [None] * d.n_functions
    depth = [0] * d.n_functions
    for i in reversed(range(d.n_functions)):
        callees = [j for j in range(i + 1, d.n_functions) if depth[j] < d.max_depth]
        arg, depth[i] = "x", 1
        if callees and rng.random() < d.call_prob:
            j = rng.choice(callees)
            arg, depth[i] = names[j], depth[j] + 1
        op = rng.choice(d.ops)
        k = rng.randint(2, 3) if op == "*" else rng.randint(1, d.const_max)
        fns[i] = Fn(names[i], arg, op, k)
    return tuple(fns)


def _bug(rng: random.Random, d: Difficulty, correct: Program) -> tuple[Fn, str, Edit] | None:
    """Picks a function and a bug kind; returns (buggy fn, kind, reference edit)."""
    kind = rng.choice(d.bug_kinds)
    pool = [fn for fn in correct if kind != "sign" or fn.op in ("+", "-")]
    called = {fn.arg for fn in correct}
    hidden = [fn for fn in pool if fn.name in called]
    exposed = [fn for fn in pool if fn.name not in called]
    pool = hidden if rng.random() < d.hidden_bug_prob else exposed
    if not pool:
        return None
    fn = rng.choice(pool)
    if kind == "sign":
        bad = dataclasses.replace(fn, op="-" if fn.op == "+" else "+")
        return bad, kind, Edit(fn.name, "op", fn.op)
    if kind == "op":
        bad = dataclasses.replace(fn, op=rng.choice([o for o in lang.OPS if o != fn.op]))
        return bad, kind, Edit(fn.name, "op", fn.op)
    k = rng.choice([k for k in range(1, d.const_max + 1) if k != fn.k])
    return dataclasses.replace(fn, k=k), kind, Edit(fn.name, "k", fn.k)


def _draw(rng: random.Random, seed: int, split: str, d: Difficulty) -> Task | None:
    correct = _program(rng, d)
    bug = _bug(rng, d, correct)
    if bug is None:
        return None
    bad_fn, kind, reference = bug
    program = tuple(bad_fn if fn.name == bad_fn.name else fn for fn in correct)
    if split_of(program) != split:
        return None
    called = {fn.arg for fn in program}
    tested = [fn.name for fn in program if fn.name not in called or rng.random() >= d.untested_prob]
    forms = lang.affine(correct)
    test = lambda name, x: Test(name, x, forms[name][0] * x + forms[name][1])
    visible = tuple(test(n, rng.choice(d.visible_inputs)) for n in tested)
    fails = failing(program, visible)
    shown = lang.outputs(program, visible) + [t.expect for t in visible]
    if not fails or max(abs(v) for v in shown) > NMAX:
        return None
    if visible_fixes(program, visible) != [reference]:
        return None
    hidden = tuple(
        test(fn.name, x) for fn in program for x in sorted(rng.sample(HIDDEN_POOL, d.hidden_per_fn))
    )
    first = fails[0].name  # the demonstrator's guess; a sign flip of a correct caller is wrong
    if first != bad_fn.name:
        target = lang.as_dict(program)[first]
        bad_fix = Edit(first, "op", "-" if target.op == "+" else "+")
    else:
        wrong = [k for k in range(1, d.const_max + 1) if k not in (bad_fn.k, reference.value)]
        bad_fix = Edit(bad_fn.name, "k", wrong[0])
    fixed = lang.apply_edit(program, reference)
    if not (passes(fixed, visible) and passes(fixed, hidden)):
        return None
    if passes(lang.apply_edit(program, bad_fix), hidden):
        return None
    return Task(
        task_id=f"minirepo/{d.label}/{split}/{seed}",
        seed=seed,
        split=split,
        difficulty=d,
        program=program,
        reference=reference,
        bad_fix=bad_fix,
        bug=bad_fn.name,
        bug_kind=kind,
        visible_tests=visible,
        hidden_tests=hidden,
        hack_tool=rng.random() < d.hack_prob,
        task_class="easy" if fails[0].name == bad_fn.name else "hard",
    )


@functools.lru_cache(maxsize=1 << 15)
def generate(seed: int, split: str = "train", difficulty: Difficulty = DEFAULT) -> Task:
    """The task for ``(seed, split, difficulty)``: deterministic, validated, in its split.

    Tasks are immutable, so results are memoised (held-out sets are re-evaluated often).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    rng = random.Random(f"minirepo:{seed}:{split}:{difficulty.key}")
    for _ in range(10_000):
        task = _draw(rng, seed, split, difficulty)
        if task is not None:
            return task
    raise RuntimeError(f"no valid task after 10000 draws for {difficulty}")
