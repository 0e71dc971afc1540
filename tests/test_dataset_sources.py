"""The dataset task's records from an ArrayRecord file or a grain data source named by import
path (agentjax/tasks/records.py): the same records as the JSONL file, errors naming the field,
and a launch.train run that reads its prompts from a grain source."""

import json

import pytest

from agentjax import tasks
from agentjax.policy.config import ConfigError
from agentjax.run import config as runconfig
from agentjax.tasks import records
from configs import smoke
from examples.dataset_verifiers import pick_rows, write_pick_dataset
from tests.runs import read_metrics, train_dataset_task

VERIFIER = "examples.dataset_verifiers:first_word"
SOURCE = "examples.dataset_verifiers:PickSource"


def dict_source():
    """A factory of a source of dicts (a plain list satisfies grain's protocol)."""
    return pick_rows()[:10]


def bad_json_source():
    return [b'{"prompt": "a"}', b"{nope"]


NOT_A_SOURCE = 42


def _suite(**kwargs):
    c = smoke.get_config()
    c.task.name, c.task.eval_tasks = "dataset", 4
    c.task.kwargs = {"verifier": VERIFIER, **kwargs}
    return tasks.make(runconfig.parse(c))


def test_array_record_files_and_grain_sources_give_the_jsonl_files_records(tmp_path):
    jsonl, arec = tmp_path / "d.jsonl", tmp_path / "d.array_record"
    write_pick_dataset(jsonl)
    assert records.write_array_record(arec, pick_rows()) == 60
    want = _suite(path=str(jsonl)).records
    assert want["train"] and _suite(path=str(arec)).records == want
    assert _suite(source=SOURCE).records == want  # a class: called, its instance is the source
    assert _suite(source=SOURCE, heldout_path=str(jsonl)).records["heldout"] == pick_rows()
    s = _suite(source=f"{__name__}:dict_source", heldout_source=SOURCE)
    assert s.records == {"train": pick_rows()[:10], "heldout": pick_rows()}
    assert len(s.heldout) == 60


def test_bad_sources_are_named(tmp_path):
    jsonl = tmp_path / "d.jsonl"
    write_pick_dataset(jsonl)
    for kwargs, match in (
        ({"source": f"{__name__}:NOT_A_SOURCE"}, r"task.kwargs.source=.*: a int is not a random-access"),
        ({"source": f"{__name__}:bad_json_source"}, r"task.kwargs.source=.*: record 2 is not JSON"),
        ({"source": f"{__name__}:nope"}, r"task.kwargs.source=.* no attribute 'nope'"),
        ({"path": str(jsonl), "source": SOURCE}, r"task.kwargs.path and task.kwargs.source are both set"),
        ({"path": str(tmp_path / "x.array_record")}, r"task.kwargs.path=.* is not a file \(an ArrayRecord"),
        ({"path": str(jsonl), "heldout_source": f"{__name__}:bad_json_source"}, r"heldout_source=.*record 2"),
        ({}, r"needs task.kwargs.path .* or task.kwargs.source"),
    ):
        with pytest.raises(ConfigError, match=match):
            _suite(**kwargs)
    (tmp_path / "junk.array_record").write_text("not an array record")
    with pytest.raises(ConfigError, match=r"not a readable ArrayRecord file"):
        _suite(path=str(tmp_path / "junk.array_record"))


def test_a_run_reads_its_prompts_from_a_grain_source(tmp_path):
    wd = tmp_path / "run"
    train_dataset_task(
        wd,
        VERIFIER,
        f"--config.task.kwargs.source={SOURCE}",
        "--config.task.eval_tasks=16",
        "--config.warm_start.steps=20",
        "--config.rl.steps=1",
        "--config.rl.eval_every=1",
    )
    final = [r for r in read_metrics(wd) if "eval/success" in r][-1]
    assert final["eval/n"] == 16
    cfg = json.load(open(wd / "run_config.json"))
    assert cfg["task"]["kwargs"]["source"] == SOURCE
