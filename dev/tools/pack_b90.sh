#!/usr/bin/env bash
# dev: after `ninja -C .gpubuild` (meson setup .gpubuild -Dcuda=enabled -Dgpu_arch=90a -Dharnesses=true),
# link variant libraries, each with one source compiled with one more define, into
# .gpubuild/native/<name>/libllamakv.so, and pack them with the library and the harnesses into
# .gpu/b90.tar.xz (tools/gpu-run.sh's prebuilt stage unpacks it under B/native; carry .gpu;
# LIB=B/native/<name>/libllamakv.so runs the stages on a variant):
#   recurrence  cuda/deltanet.cu -DLKV_DR_CHUNKED_ON=0: the delta rule's recurrence for prefill too
#   mvq2        cuda/mvq.cu -DLKV_MVQ_ROWS=2: the k-quant / i-quant mat-vec with 2 rows a warp
#   seqs        context.c -DLKV_GPU_SEQS=1: several hybrid / MTP sequences a context on the GPU
#               (for tests/test_cuda_qwen35_multiseq.py and test_mtp_multiseq.py's GPU cases)
# VARIANTS: which (default: all three)
set -euo pipefail
cd "$(dirname "$0")/../../.gpubuild"

variant() {   # name, source path suffix, extra define
    local name=$1 src=$2 def=$3 obj cmd link
    mkdir -p native/$name
    cmd=$(python3 -c "
import json, sys
for c in json.load(open('compile_commands.json')):
    if c['file'].endswith(sys.argv[1]): print(c['command'])" "$src")
    obj=$(sed -E 's/.* -o ([^ ]+) .*/\1/' <<< "$cmd")
    cmd=${cmd//$obj/native\/$name\/variant.o}
    cmd=${cmd/-DLKV_HAVE_CUDA=1/-DLKV_HAVE_CUDA=1 $def}
    [[ $cmd == *$def* ]] || cmd="$cmd $def"
    eval "$cmd"
    link=$(ninja -t commands native/libllamakv.so | tail -1)
    link=${link//$obj/native\/$name\/variant.o}
    link=${link/-o native\/libllamakv.so /-o native\/$name\/libllamakv.so }
    eval "$link"
    echo "variant $name: $src $def"
}

FILES="libllamakv.so test_ops cuda_bench test_attn_mma"
for v in ${VARIANTS:-recurrence mvq2 seqs}; do
    case $v in
    recurrence) variant recurrence cuda/deltanet.cu -DLKV_DR_CHUNKED_ON=0 ;;
    mvq2) variant mvq2 cuda/mvq.cu -DLKV_MVQ_ROWS=2 ;;
    seqs) variant seqs src/context.c -DLKV_GPU_SEQS=1 ;;
    *) echo "unknown variant $v"; exit 1 ;;
    esac
    FILES="$FILES $v/libllamakv.so"
done
cd native
tar cf - $FILES | xz -T2 --lzma2=preset=6,dict=192MiB > ../../.gpu/b90.tar.xz
ls -la ../../.gpu/b90.tar.xz
