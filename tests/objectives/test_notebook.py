"""Executes examples/objectives.ipynb so that it cannot rot: any cell error fails the test."""

import pathlib

import nbclient
import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "objectives.ipynb"


def test_objectives_notebook_runs(monkeypatch):
    # The kernel is a subprocess: it inherits the environment (CPU platform, fake devices) and
    # gets the suite's persistent compilation cache through JAX's environment variables.
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(ROOT / ".jax_cache"))
    monkeypatch.setenv("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(o.get("output_type") != "error" for c in code for o in c.get("outputs", []))
    text = "".join(o.get("text", "") for c in code for o in c.get("outputs", []))
    assert "loss =" in text and "masked/kpop" in text and "step 5:" in text
