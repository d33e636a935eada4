#!/usr/bin/env bash
# Source this file: `source .ci/env.sh <torch-version>`.
#
# Two layers, both outside the clone:
#  * a base virtual environment per torch leg with torch and the test tools,
#    keyed by the torch pin (torch 2.7.1 from the package index is a ~3 GB
#    download, so it is made once and reused);
#  * a thin per-checkout environment on top of it (a .pth file makes the base
#    importable) holding only this checkout's editable install, so that two
#    clones on one machine never re-point each other's `import torch_npu...`.
_leg="${1:-2.7.1}"
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_reqs=("$_root/test/requirements-torch${_leg}.txt" "$_root/test/requirements-test.txt")
for f in "${_reqs[@]}"; do [ -f "$f" ] || { echo "env.sh: missing $f" >&2; return 2; }; done
_py="$(python3 -c 'import sys;print("py%d%d"%sys.version_info[:2])')"
_cache="${TORCH_NPU_PATCHSET_CACHE:-$HOME/.cache/torch-npu-inductor-patches}"
_base="$_cache/venv-torch${_leg}-${_py}-$(sha256sum < "${_reqs[0]}" | cut -c1-12)"
_overlay="$_cache/checkout-$(printf %s "$_root" | sha256sum | cut -c1-12)-torch${_leg}-${_py}"

_env_sh_main() {
  set -euo pipefail
  # Two checkouts preparing one leg at once would both remove and refill the same base (one import then
  # lacked torch's CUDA libraries): the first to come makes it, the other waits for it.
  mkdir -p "$_cache"
  exec 9>"$_cache/.env-torch${_leg}.lock"
  flock 9
  if [ ! -f "$_base/.complete" ]; then
    # Said before any work: the first run downloads for minutes, and pip's own lines are the progress.
    echo "env.sh: first run for torch $_leg: making its virtual environment in $_base" >&2
    echo "env.sh: pip downloads torch $_leg and the libraries it needs (about 3 GB): typically 3 to 6 minutes;" \
      "later runs reuse it" >&2
    rm -rf "$_base"
    mkdir -p "$_cache"
    python3 -m venv "$_base"
    "$_base/bin/python" -m pip install -q --upgrade pip setuptools wheel
    "$_base/bin/python" -m pip install -r "${_reqs[0]}" -r "${_reqs[1]}" 1>&2
    touch "$_base/.complete"
    echo "env.sh: torch $_leg environment ready" >&2
  fi
  # Test tools: a no-op once satisfied, so editing this list never re-downloads torch.
  "$_base/bin/python" -m pip install -q -r "${_reqs[1]}"
  # Earlier layouts installed the project into the base itself; keep it out.
  if [ -n "$(ls -d "$_base"/lib/python*/site-packages/torch_npu_inductor_patches-*.dist-info 2>/dev/null)" ]; then
    "$_base/bin/python" -m pip uninstall -y -q torch-npu-inductor-patches
  fi
  if [ ! -x "$_overlay/bin/python" ] || [ "$(cat "$_overlay/.base" 2>/dev/null)" != "$_base" ]; then
    rm -rf "$_overlay"
    "$_base/bin/python" -m venv --without-pip "$_overlay"
    local site base_site
    site="$("$_overlay/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    base_site="$("$_base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    echo "$base_site" > "$site/torch_leg_base.pth"
    echo "$_base" > "$_overlay/.base"
  fi
  "$_overlay/bin/python" -m pip install -q --no-deps --no-build-isolation -e "$_root" \
    >"$_overlay/editable-install.log" 2>&1 || { cat "$_overlay/editable-install.log" >&2; return 1; }
}

if ( _env_sh_main ); then
  # shellcheck disable=SC1091
  source "$_overlay/bin/activate"
  export PATH="$_overlay/bin:$_base/bin:$PATH"  # the base's tools too (cmake, ninja from pip)
  export TORCH_NPU_PATCHSET_BUILD_CACHE="${TORCH_NPU_PATCHSET_BUILD_CACHE:-$_cache/build}"
else
  echo "env.sh: could not prepare the environment for torch $_leg" >&2
  return 1 2>/dev/null || exit 1
fi
