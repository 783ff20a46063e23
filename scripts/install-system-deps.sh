#!/usr/bin/env bash
# What the test suite needs from the system, installed only where missing (Debian/Ubuntu, as root or via sudo):
#   chromium  - the browser test drives Debian's chromium (Playwright cannot download browsers offline);
#   g++       - GCSwR's fused CPU kernel is compiled on first use (gcs/sampling/kernels.py);
#   buildah, debootstrap - the Dockerfile is built with buildah on a base made by debootstrap (scripts/check-docker.sh).
set -euo pipefail
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v buildah >/dev/null 2>&1 || missing+=(buildah)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
    echo "install-system-deps: missing ${missing[*]}; install them (apt-get install ${missing[*]}) or run as root" >&2
    exit 1
  fi
fi
echo "install-system-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
