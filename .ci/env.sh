#!/usr/bin/env bash
# Source this file: `source .ci/env.sh <torch-version>`.
# Creates (once) and activates a virtual environment for one torch leg, cached
# outside the clone and keyed by the requirement files, so a second run reuses
# it (torch 2.7.1 from the package index is a ~3 GB download). Then installs
# this project into it in editable mode (cheap; the clone path may change).
set -euo pipefail
_leg="${1:-2.7.1}"
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_reqs=("$_root/test/requirements-torch${_leg}.txt" "$_root/test/requirements-test.txt")
for f in "${_reqs[@]}"; do [ -f "$f" ] || { echo "env.sh: missing $f" >&2; return 2; }; done
_key="$(sha256sum < "${_reqs[0]}" | cut -c1-12)"  # the torch pin is the expensive part
_cache="${TORCH_NPU_PATCHSET_CACHE:-$HOME/.cache/torch-npu-inductor-patches}"
_venv="$_cache/venv-torch${_leg}-$(python3 -c 'import sys;print("py%d%d"%sys.version_info[:2])')-$_key"
if [ ! -f "$_venv/.complete" ]; then
  echo "env.sh: creating $_venv (first run for this leg; large download)" >&2
  rm -rf "$_venv"
  mkdir -p "$_cache"
  python3 -m venv "$_venv"
  "$_venv/bin/python" -m pip install -q --upgrade pip setuptools wheel
  "$_venv/bin/python" -m pip install -q -r "${_reqs[0]}"
  touch "$_venv/.complete"
fi
# shellcheck disable=SC1091
source "$_venv/bin/activate"
# Test tools: a no-op once satisfied, so editing this list never re-downloads torch.
python -m pip install -q -r "${_reqs[1]}"
python -m pip install -q --no-deps --no-build-isolation -e "$_root" >"$_cache/editable-install.log" 2>&1 \
  || { cat "$_cache/editable-install.log" >&2; return 1; }
export TORCH_NPU_PATCHSET_BUILD_CACHE="${TORCH_NPU_PATCHSET_BUILD_CACHE:-$_cache/build}"
