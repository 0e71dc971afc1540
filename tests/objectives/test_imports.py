"""objectives/ sits low in the import graph: jax, numpy and the trajectory record only."""

import ast
import inspect
import pathlib

import agentjax.objectives as objectives

ALLOWED = {
    "__future__",
    "typing",
    "collections",
    "dataclasses",
    "inspect",
    "jax",
    "numpy",
    "chex",
    "agentjax",
}
# importpath: the import-path door of the loss registry (stdlib only: importlib)
ALLOWED_AGENTJAX = ("agentjax.objectives", "agentjax.trajectory", "agentjax.importpath")


def test_objectives_import_only_jax_numpy_and_trajectory():
    pkg = pathlib.Path(objectives.__file__).parent
    for path in sorted(pkg.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):  # from agentjax import x: agentjax.x
                names = [
                    f"{node.module}.{a.name}" if node.module == "agentjax" else node.module or ""
                    for a in node.names
                ]
            else:
                continue
            for name in names:
                assert name.split(".")[0] in ALLOWED, (path.name, name)
                if name.startswith("agentjax"):
                    assert name.startswith(ALLOWED_AGENTJAX), (path.name, name)


def test_public_api_is_exported():
    for name in objectives.__all__:
        assert callable(getattr(objectives, name)) or name == "AGGREGATION_MODES", name
    contract = {
        "masked_mean", "aggregate", "group_advantages", "rloo_advantages", "gae",
        "discounts_from", "ppo_loss", "grpo_loss", "gspo_loss", "cispo_loss",
        "importance_weights", "truncate", "decompose_ratio", "icepop_mask", "binary_kl",
        "kpop_mask", "ess", "kl_penalty", "mis_po_loss", "hispo_loss",
    }  # fmt: skip
    assert contract <= set(objectives.__all__)


EMPTY = inspect.Parameter.empty


def _params(fn):
    sig = inspect.signature(fn)
    pos = [p.name for p in sig.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    kw = {p.name: p.default for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
    return pos, kw


def test_public_functions_keep_their_contract_signatures():
    o = objectives
    assert _params(o.masked_mean) == (["x", "mask", "axis"], {})
    assert _params(o.aggregate)[0] == ["per_token", "mask", "mode"]
    assert _params(o.group_advantages) == (["rewards"], {"scale": "std", "eps": 1e-6})
    assert _params(o.gae)[0] == ["rewards", "discounts", "values", "lam"]
    assert _params(o.discounts_from)[0] == ["stop_reasons", "gamma"]
    pos, kw = _params(o.ppo_loss)
    assert pos == ["logp", "old_logp", "advantages", "mask"]
    # the clip epsilons have no default: the loss registry holds the papers' values (issue #28)
    assert (kw["clip_low"], kw["clip_high"], kw["aggregation"]) == (EMPTY, EMPTY, "token_mean")
    pos, kw = _params(o.gspo_loss)
    assert pos == ["logp", "old_logp", "advantages", "mask"]
    assert set(kw) == {"clip_low", "clip_high"}
    pos, kw = _params(o.cispo_loss)
    assert kw["clip_low"] is EMPTY and kw["aggregation"] == "token_mean" and "clip_high" in kw
    assert _params(o.importance_weights) == (
        ["logp_target", "logp_behavior", "mask"],
        {"level": EMPTY},
    )
    assert _params(o.truncate)[0] == ["w", "cap"]
    assert _params(o.decompose_ratio)[0] == [
        "logp_current",
        "logp_train_at_behavior_version",
        "logp_infer",
    ]
    assert _params(o.icepop_mask) == (
        ["train_logp", "infer_logp"],
        {"low": EMPTY, "high": EMPTY},
    )
    assert _params(o.binary_kl)[0] == ["p", "q"]
    assert _params(o.kpop_mask) == (["train_logp", "infer_logp"], {"threshold": EMPTY})
    assert _params(o.ess) == (["weights", "mask"], {})
    assert _params(o.kl_penalty)[0] == ["logp", "ref_logp", "kind"]
    assert _params(o.hispo_loss)[0] == [
        "logp_current",
        "logp_train_at_behavior_version",
        "logp_infer",
        "advantages",
        "mask",
    ]
