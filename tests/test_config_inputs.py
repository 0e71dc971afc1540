"""Every config and CLI input is checked before any work (issue #31): a one-line error naming the
field or the file, never a traceback. Before, a bound that was not a pair raised ``TypeError: object
of type 'float' has no len()``, a mesh axis of -1 a raw ``ValueError`` from the mesh code, and a
config file with null bytes or a syntax error a raw ``SyntaxError`` traceback."""

import dataclasses
import math
import random

import pytest

from agentjax.objectives import registry
from agentjax.policy.config import ConfigError, ModelConfig
from agentjax.run.config import _SECTIONS, parse
from configs import default
from tests.runs import run_module

HOSTILE = [
    -1,
    0,
    -(10**30),
    10**30,
    2**31,
    -0.5,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    "",
    "x",
    "7",
    "é✓𝔘",
    "\x00",
    True,
    None,
    [],
    [math.nan, 1],
    ["x"],
    {},
    {"data": -1},
    {"x": "y"},
]


def _fields():
    """(path, value to mutate into) for every field of every section, the model's, the top-level
    ones, and one level into the dict-valued fields (the losses' own fields, meshes, rates)."""
    out = [((s, f.name),) for s, cls in _SECTIONS.items() for f in dataclasses.fields(cls)]
    out += [(("model", f.name),) for f in dataclasses.fields(ModelConfig) if f.name != "vocab_size"]
    out += [((k,),) for k in ("seed", "checkpoint_every", "log_every", "report", "targets")]
    out += [(("targets", k),) for k in ("success", "gain_over_rl_start", "x")]
    for name, cls in registry.LOSSES.items():
        out += [(("loss", name, f.name), ("loss", "name", name)) for f in dataclasses.fields(cls)]
    out += [(("placement", m, a),) for m in ("learner_mesh", "sampler_mesh") for a in ("data", "fsdp", "x")]
    out += [(("faults", "rates", "env_crash"),), (("admission", "class_max_gap", "default"),)]
    return out


def _set(c, path, value):
    for p in path[:-1]:
        if not isinstance(c.get(p), dict):
            c[p] = {}
        c = c[p]
    c[path[-1]] = value


def test_every_field_with_hostile_values_parses_or_is_named():
    """Each field (and the dict-valued ones a level down) set to a wrong type, NaN, inf, a
    negative, a huge, an empty or a unicode value, alone and with 1-2 others: ``parse`` accepts
    it or raises ConfigError naming a mutated field; never another exception."""
    rng = random.Random(31)
    fields = _fields()
    cases = [[(f, v)] for f in fields for v in HOSTILE]  # every field x every value, alone
    cases += [
        [(rng.choice(fields), rng.choice(HOSTILE)) for _ in range(rng.randint(2, 3))] for _ in range(300)
    ]
    accepted = 0
    for case in cases:
        c = default.get_config().to_dict()
        names = []
        for (path, *extra), value in case:
            for e in extra:  # e.g. select the loss whose field is mutated
                _set(c, e[:-1], e[-1])
            _set(c, path, value)
            names.append(".".join(path[:2]))
        try:
            parse(c)
            accepted += 1
        except ConfigError as e:
            assert "\n" not in str(e) and any(n in str(e) for n in names), (case, str(e))
        except Exception as e:  # noqa: BLE001 - the point of the test
            raise AssertionError(f"{case}: {type(e).__name__}: {e}") from e
    assert accepted > 100  # both outcomes are exercised


@pytest.mark.parametrize(
    "mesh, match",
    [
        ({"data": -1}, r"placement.learner_mesh.data=-1 is invalid; must be an integer >= 1"),
        ({"data": 0}, r"placement.learner_mesh.data=0 is invalid"),
        ({"data": "2"}, r"placement.learner_mesh.data='2' is invalid"),
        ({"rows": 2}, r"placement.learner_mesh.rows is not a mesh axis"),
    ],
)
def test_mesh_axis_sizes_are_checked_by_parse(mesh, match):
    c = default.get_config()
    c.placement.learner_mesh = mesh
    with pytest.raises(ConfigError, match=match):
        parse(c)


def test_a_mesh_larger_than_the_devices_is_a_config_error_before_any_work(tmp_path):
    from agentjax.run import loop
    from tests.runs import tiny_config

    c = tiny_config("default", placement__learner_mesh__data=16)  # 8 fake devices in the suite
    with pytest.raises(ConfigError, match=r"placement.learner_mesh=\{'data': 16.*do not fit the 8 devices"):
        loop.train(c, str(tmp_path / "wd"), log=lambda s: None)
    assert not (tmp_path / "wd" / "metrics.jsonl").exists()


_BAD_FILES = {
    "null_bytes": "def get_config():\n    return {}\x00\n",
    "syntax_error": "def get_config(:\n",
}


@pytest.mark.parametrize(
    "case", ["null_bytes", "syntax_error", "missing_file", "unknown_override", "mistyped_override"]
)
def test_bad_config_files_and_overrides_are_one_line_errors(tmp_path, case):
    path = tmp_path / f"{case}.py"
    if case in _BAD_FILES:
        path.write_text(_BAD_FILES[case])
    args = [f"--config={path}"] if case in (*_BAD_FILES, "missing_file") else []
    args += {
        "unknown_override": ["--config.rl.nosuch=1"],
        "mistyped_override": ["--config.rl.steps=abc"],
    }.get(case, [])
    out = run_module("launch.train", *args, f"--workdir={tmp_path / 'wd'}", timeout=120)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert line.startswith("invalid config: ")
    want = {"unknown_override": "nosuch", "mistyped_override": "--config.rl.steps=abc"}.get(case, str(path))
    assert want in line, line
    assert not (tmp_path / "wd").exists()  # nothing written


@pytest.mark.parametrize(
    "section, field", [("caps", "max_obs_tokens"), ("model", "max_seq_len"), ("rl", "batch_size")]
)
def test_a_huge_size_is_named_before_it_is_allocated(section, field):
    """A size far above any real run (a typo) is a ConfigError at parse, not a MemoryError after
    the warm start."""
    c = default.get_config()
    c[section][field] = 10**9
    with pytest.raises(
        ConfigError, match=rf"{section}.{field}=1000000000 is invalid; must be >= 1 and <= \d+"
    ):
        parse(c)
