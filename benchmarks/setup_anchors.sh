#!/usr/bin/env bash
# Creates the benchmark-only virtual environment holding the anchors (google-tunix, transformers,
# torch CPU) next to agentjax, so they never become runtime dependencies of agentjax.
#
#   bash benchmarks/setup_anchors.sh            # -> .venv-anchors/ in the repository root
#   .venv-anchors/bin/python benchmarks/sampler.py
#
# torch==2.13.0 resolves to the local CPU wheel on this machine (/opt/wheels); a plain `torch`
# would pull a multi-GB CUDA build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv-anchors}"
PY="${PYTHON:-python3}"

"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --upgrade pip
# google-tunix 0.1.7 pins safetensors<0.8 (and pulls tensorflow-datasets, kagglehub, ...), which
# cannot resolve next to agentjax's pins: install it without its dependencies, then the modules its
# sampler imports, under agentjax's constraints (safetensors 0.8 works for what the benchmark uses).
"$VENV/bin/pip" install -q -c "$ROOT/constraints.txt" -e "$ROOT" "torch==2.13.0" "transformers>=4.50,<6"
"$VENV/bin/pip" install -q --no-deps "google-tunix==0.1.7"
"$VENV/bin/pip" install -q -c "$ROOT/constraints.txt" jaxtyping omegaconf "qwix>=0.1.6" \
  "google-metrax>=0.2.3" sentencepiece tqdm tenacity jinja2 importlib_resources python-dotenv \
  fsspec sympy perfetto pandas
"$VENV/bin/python" - <<'PY'
import jax, tunix, torch, transformers, agentjax
from tunix.generate import sampler  # noqa: F401 (what benchmarks/sampler.py uses)
print("anchors ready: jax", jax.__version__, "| tunix", getattr(tunix, "__version__", "0.1.7"),
      "| torch", torch.__version__, "| transformers", transformers.__version__)
PY
