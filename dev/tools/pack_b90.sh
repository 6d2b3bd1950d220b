#!/usr/bin/env bash
# dev: after `ninja -C .gpubuild` (meson setup .gpubuild -Dcuda=enabled -Dgpu_arch=90a -Dharnesses=true),
# link a second library whose delta rule keeps the recurrence for prefill too (-DLKV_DR_CHUNKED_ON=0)
# into .gpubuild/native/recurrence/, and pack both with the harnesses into .gpu/b90.tar.xz
# (tools/gpu-run.sh's prebuilt stage unpacks it; carry .gpu)
set -euo pipefail
cd "$(dirname "$0")/../../.gpubuild"
mkdir -p native/recurrence
CMD=$(python3 -c "
import json
for c in json.load(open('compile_commands.json')):
    if c['file'].endswith('cuda/deltanet.cu'): print(c['command'])")
CMD=${CMD//src_cuda_deltanet.cu.o/recurrence_deltanet.o}
CMD=${CMD/-DLKV_HAVE_CUDA=1/-DLKV_HAVE_CUDA=1 -DLKV_DR_CHUNKED_ON=0}
eval "$CMD"
L=$(ninja -t commands native/libllamakv.so | tail -1)
L=${L//native\/libllamakv.so.p\/src_cuda_deltanet.cu.o/native\/libllamakv.so.p\/recurrence_deltanet.o}
L=${L/-o native\/libllamakv.so /-o native\/recurrence\/libllamakv.so }
eval "$L"
cd native
tar cf - libllamakv.so test_ops cuda_bench test_attn_mma recurrence/libllamakv.so \
    | xz -T2 --lzma2=preset=6,dict=192MiB > ../../.gpu/b90.tar.xz
ls -la ../../.gpu/b90.tar.xz
