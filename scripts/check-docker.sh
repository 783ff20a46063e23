#!/usr/bin/env bash
# The Dockerfile built as it is, with no Docker daemon and no image registry (issue 69, item 3): Debian's buildah
# builds it as root (--isolation chroot, the vfs storage driver: no overlay mounts, no user namespaces needed).
#   bash scripts/check-docker.sh base              the base image's stand-in, made once and kept
#   bash scripts/check-docker.sh build             the base if missing, then the image, built fresh (its id: stdout)
#   bash scripts/check-docker.sh container IMAGE   a container of the image (its id: stdout)
#   bash scripts/check-docker.sh serve CONTAINER PORT   the image's command in it, on 127.0.0.1:PORT (as `docker run
#                                                  -p 127.0.0.1:PORT:7860` would), until stopped
#   bash scripts/check-docker.sh remove-container ID... / remove-image ID...   clean-up by id
# tests/test_docker.py runs them in that order. GCS_DOCKER_CONTEXT builds another folder's Dockerfile (the tests' own).
# The base: the Dockerfile's FROM (python:3.11-slim) cannot be pulled here, so a stand-in is made from Debian's packages
# (debootstrap of bookworm, whose python3 is 3.11) and tagged with the FROM's name in a store of its own; docs/deploy.md
# ("Docker") says how it differs from the real one.
# This machine's pip settings (its config files and PIP_* variables: a local index, find-links) reach the build as a
# pip.conf mounted at /etc/pip.conf for each RUN, with the local folders they name mounted read-only where they are:
# nothing of them is written into the Dockerfile or the image. pip's retries are one unless set (see pip_settings).
# Every failure ends in one line "check-docker: <step> failed: ..." (the test reports it as is).
set -euo pipefail
cd "${GCS_DOCKER_CONTEXT:-$(dirname "$0")/..}"
step="start"
trap 'status=$?; [ $status -eq 0 ] || echo "check-docker: $step failed (exit $status)" >&2' EXIT
fail() { echo "check-docker: $step failed: $*" >&2; trap - EXIT; exit 1; }

# A store of its own (not /var/lib/containers/storage, which may hold another driver's layers): vfs copies each layer
# whole, so its size is worth knowing (du -sh on it).
STORE=${GCS_DOCKER_STORE:-/var/lib/containers/gcs-check}
MIRROR=${GCS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
STORE_OPTIONS=(--root "$STORE/storage" --runroot "$STORE/run" --storage-driver vfs)
buildah() { command buildah "${STORE_OPTIONS[@]}" "$@"; }
base_name() {  # the FROM's image as buildah names it: python:3.11-slim -> docker.io/library/python:3.11-slim
  local from
  from=$(awk 'toupper($1) == "FROM" {print $2; exit}' Dockerfile)
  case "$from" in
    */*/*) echo "$from" ;;
    */*) echo "docker.io/$from" ;;
    *) echo "docker.io/library/$from" ;;
  esac
}

requirements() {
  step="the requirements check"
  [ "$(id -u)" -eq 0 ] || fail "needs root (buildah's chroot isolation and debootstrap); run as root"
  local tool
  for tool in buildah debootstrap; do
    type -P "$tool" >/dev/null || fail "no $tool: bash scripts/install-system-deps.sh installs it"
  done
  mkdir -p "$STORE"
}

make_base() {
  local name id root
  name=$(base_name)
  exec 9> "$STORE/base.lock"
  flock 9  # one base at a time: two tests may ask for it at once
  if id=$(buildah inspect --type image --format '{{.FromImageID}}' "$name" 2>/dev/null); then
    echo "check-docker: base $name is cached ($id)"
    return
  fi
  step="the base image's stand-in (reaching Debian's mirror $MIRROR)"
  python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=60).read(1)' \
    "$MIRROR/dists/bookworm/Release" 2>/dev/null || fail "Debian's mirror does not answer"
  step="the base image's stand-in (debootstrap of bookworm from $MIRROR)"
  root=$(mktemp -d /var/tmp/gcs-base.XXXXXX)
  # (a trap on RETURN would also fire for functions returning inside; the root goes at the end or on the next run)
  local started=$SECONDS
  # python3-dev: the real image carries Python's headers (/usr/local/include), which torch's C++ extensions need
  debootstrap --variant=minbase \
    --include=python3,python3-pip,python3-venv,python3-dev,python-is-python3,ca-certificates \
    bookworm "$root" "$MIRROR" > "$STORE/debootstrap.log" 2>&1 \
    || fail "$(tail -n 3 "$STORE/debootstrap.log" | tr '\n' ' ' | cut -c1-600)"
  echo "check-docker: debootstrap took $((SECONDS - started)) s"
  step="the base image's stand-in (its files)"
  # As the real image: pip installs into the interpreter (no PEP 668 marker), apt reads bookworm, its updates and
  # security, and no package lists or archives are left in it.
  rm -f "$root"/usr/lib/python3*/EXTERNALLY-MANAGED
  cat > "$root/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
  step="the base image's stand-in (importing it as $name)"
  local container mount
  container=$(buildah from scratch)
  mount=$(buildah mount "$container")
  tar -C "$root" -cf - . | tar -C "$mount" -xpf -
  buildah umount "$container" >/dev/null
  rm -rf "$root"
  # The real image's settings: its PATH (its python is in /usr/local/bin; Debian's in /usr/bin), UTF-8, python3.
  buildah config --env LANG=C.UTF-8 \
    --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$container"
  id=$(buildah commit --quiet --rm "$container" "$name")
  echo "check-docker: base $name made ($id), $(du -sh "$STORE/storage" | cut -f1) in $STORE/storage"
}

# This machine's pip settings as one file, and the local folders and files they name (mounted where they are).
pip_settings() {
  local folder=$1
  python - "$folder/pip.conf" > "$folder/mounts" <<'PY'
import configparser, os, pathlib, subprocess, sys
from urllib.parse import urlsplit
settings = configparser.ConfigParser()
settings["global"] = {}
# `pip config list` merges the files (global, user, site) and PIP_* variables (":env:."), the variables winning
for line in subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                           check=True).stdout.splitlines():
    key, _, value = line.partition("=")
    section, _, option = key.rpartition(".")
    if section in (":env:", "global", "install", "download", "wheel"):
        settings["global"][option] = value.strip().strip("'\"")
# One retry where the machine sets none, not pip's five: the Dockerfile's PyTorch index is unreachable here, and each of
# torch's lookups on it waited through the five retries' back-off (`pip download torch==2.13.0 --index-url` that index:
# 77 s with five, 2 s with one); a registry that is reachable still gets a second try.
settings["global"].setdefault("retries", "1")
pathlib.Path(sys.argv[1]).write_text("".join(f"{k} = {v}\n" for k, v in settings["global"].items()).join(["[global]\n", ""]))
paths = set()
for value in settings["global"].values():
    for word in value.split():
        # a file: index's pages link to its files beside it (../../files/...): its parent folder goes in whole
        path = os.path.dirname(urlsplit(word).path.rstrip("/")) if word.startswith("file:") else word
        if path.startswith("/") and os.path.exists(path):
            paths.add(path)
print("\n".join(sorted(paths)))
PY
}

build_image() {
  local folder id started
  folder=$(mktemp -d)
  step="the image's build (reading this machine's pip settings)"
  pip_settings "$folder"
  local mounts=(--volume "$folder/pip.conf:/etc/pip.conf:ro")
  while read -r path; do
    [ -n "$path" ] && mounts+=(--volume "$path:$path:ro")
  done < "$folder/mounts"
  echo "check-docker: pip settings passed in: $(grep -v '^\[' "$folder/pip.conf" | paste -sd';')"
  step="the image's build (buildah build of the Dockerfile)"
  started=$SECONDS
  # --pull=never: the base is the local stand-in (no registry); --layers=false: no intermediate image per step (vfs
  # would copy the whole tree for each); no tag: the image is known by its id alone. Its log, each line timed (where
  # the minutes go), goes to stderr, so that stdout ends with the image's id.
  if ! buildah build --isolation chroot --network host --pull=never --layers=false --force-rm \
      "${mounts[@]}" --iidfile "$folder/id" . 2>&1 | awk '{ print strftime("%H:%M:%S"), $0; fflush() }' \
      | tee "$folder/build.log" >&2; then
    fail "$(grep -m1 -o 'building at STEP.*' "$folder/build.log" | cut -c1-600)"
  fi
  id=$(sed 's/^sha256://' "$folder/id")
  rm -rf "$folder"
  echo "check-docker: built in $((SECONDS - started)) s, $(buildah images --format '{{.ID}} {{.Size}}' \
    | awk -v id="${id:0:12}" '$1 == id {print $2, $3}')"
  echo "$id"
}

serve() {  # the image's CMD as it is (docker run's), its listening address moved to loopback
  local container=$1 port=$2 command=()
  step="serving the image's command"
  mapfile -d '' command < <(buildah inspect --type container "$container" | python -c 'import json, sys
config = json.load(sys.stdin)["OCIv1"]["config"]  # (Docker runs ENTRYPOINT + CMD)
sys.stdout.write("".join(word + "\0" for word in (config.get("Entrypoint") or []) + (config.get("Cmd") or [])))')
  [ ${#command[@]} -gt 0 ] || fail "the image has no command"
  echo "check-docker: serving $(printf '%q ' "${command[@]}")on 127.0.0.1:$port" >&2
  exec "$(type -P buildah)" "${STORE_OPTIONS[@]}" run --isolation chroot --network host --env GRADIO_SERVER_NAME=127.0.0.1 \
    --env GRADIO_SERVER_PORT="$port" "$container" -- "${command[@]}"
}

command_name=${1:-build}
[ $# -eq 0 ] || shift
case "$command_name" in
  base) requirements; make_base ;;
  build) requirements; make_base; build_image ;;
  container) requirements; step="a container of image $1"
    buildah inspect --type container --format '{{.ContainerID}}' "$(buildah from --pull=never --quiet "$1")" ;;
  serve) requirements; serve "$@" ;;
  remove-container) requirements; step="removing containers $*"; buildah rm "$@" >/dev/null ;;
  remove-image) requirements; step="removing images $*"; buildah rmi "$@" >/dev/null ;;
  *) echo "usage: check-docker.sh base | build | container IMAGE | serve CONTAINER PORT | remove-container ID... |" \
       "remove-image ID..." >&2; exit 2 ;;
esac
