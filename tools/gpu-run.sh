#!/usr/bin/env bash
# tools/gpu-run.sh: everything the GPU machine does for the CUDA backend, in one
# call of the device tool: install the carried wheels, build for the H200
# (sm_90), run the kernel harness (tests/cuda/test_ops.c), the Python GPU tests
# (tests/test_cuda.py) and the speed benchmark (benchmarks/cuda_bench.c), with
# and without the decode-step graph (tools/forward-graph.patch applied to a
# copy of forward.c). Logs go to $OUT; the last lines printed are the summary.
#
# Here, once:  bash ../shared/tools/device-wheels.sh   (makes .whl/)
#              python3 tools/truncate_gguf.py <SmolLM2 gguf> .models/smollm2-8l.gguf 8
# Then:        device run, carry [".whl", ".models"], command "bash tools/gpu-run.sh"
# Stages can be chosen: STAGES="build ops py bench" (default: all).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
STAGES=${STAGES:-"build ops py bench"}
ARCH=${GPU_ARCH:-90}
B=/tmp/build-gpu
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv \
    | tee "$OUT/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi

CFLAGS="-O3 -std=gnu11 -march=native -ffp-contract=off -D_GNU_SOURCE -DLKV_HAVE_CUDA=1 -Inative/include -Inative/src -I/usr/local/cuda/include"
LIBS="-L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -lm"

if [[ $STAGES == *build* ]]; then
    stamp "build (meson, sm_$ARCH)"
    { meson setup "$B" -Dcuda=enabled -Dgpu_arch="$ARCH" --buildtype=release && ninja -C "$B"; } \
        > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    OBJS=$(ls $B/native/libllamakv.so.p/*.o)
    # a forward.c with the graph hooks, for the *_graph binaries
    mkdir -p /tmp/fg/a && cp native/src/forward.c /tmp/fg/forward.c
    python3 - <<'PY' || exit 1
# apply the single-hunk patch: context and '-' lines -> context and '+' lines
lines = open("tools/forward-graph.patch").read().split("\n")
body = [l for l in lines[lines.index(next(l for l in lines if l.startswith("@@"))) + 1:]]
old = "\n".join(l[1:] for l in body if l[:1] in (" ", "-"))
new = "\n".join(l[1:] for l in body if l[:1] in (" ", "+"))
src = open("/tmp/fg/forward.c").read()
assert old in src, "forward-graph.patch does not apply"
open("/tmp/fg/forward.c", "w").write(src.replace(old, new))
PY
    gcc $CFLAGS -fvisibility=hidden -c /tmp/fg/forward.c -o /tmp/fg/forward.o || exit 1
    OBJS_G=$(echo "$OBJS" | grep -v 'forward\.c\.o'; echo /tmp/fg/forward.o)
    for prog in tests/cuda/test_ops.c:test_ops benchmarks/cuda_bench.c:cuda_bench; do
        src=${prog%%:*}; name=${prog##*:}
        gcc $CFLAGS -c "$src" -o /tmp/$name.o || exit 1
        g++ -o /tmp/$name /tmp/$name.o $OBJS $LIBS || exit 1
        g++ -o /tmp/${name}_graph /tmp/$name.o $OBJS_G $LIBS || exit 1
    done
    stamp "built"
fi

if [[ $STAGES == *ops* ]]; then
    stamp "kernel harness"
    timeout 180 /tmp/test_ops > "$OUT/test_ops.log" 2>&1; echo "test_ops rc=$?" >> "$OUT/test_ops.log"
    timeout 120 /tmp/test_ops_graph model > "$OUT/test_ops_graph.log" 2>&1
    echo "test_ops_graph rc=$?" >> "$OUT/test_ops_graph.log"
    grep -E "FAIL|passed|rc=" "$OUT/test_ops.log" "$OUT/test_ops_graph.log" | head -60
fi

if [[ $STAGES == *py* ]]; then
    stamp "python GPU tests"
    export PYLLAMAKV_LIBRARY=$B/native/libllamakv.so PYLLAMAKV_REPORT_DIR=$OUT
    [ -f .models/smollm2-8l.gguf ] && export PYLLAMAKV_TEST_GGUF=$PWD/.models/smollm2-8l.gguf
    timeout 240 python3 -m pytest -q -s -p no:cacheprovider tests/test_cuda.py > "$OUT/pytest.log" 2>&1
    echo "pytest rc=$?" >> "$OUT/pytest.log"
    grep -E "top1|passed|failed|error|rc=" "$OUT/pytest.log" | tail -15
fi

if [[ $STAGES == *bench* ]]; then
    stamp "benchmark (8B shape, q4_0 weights)"
    {
        echo "== q8_0 KV, no graph";  timeout 150 /tmp/cuda_bench 2 8 0,32768,131072
        echo "== q8_0 KV, graph";     timeout 150 /tmp/cuda_bench_graph 2 8 0,32768,131072
        echo "== f16 KV, graph";      timeout 60 /tmp/cuda_bench_graph 2 1 0
    } > "$OUT/bench.log" 2>&1
    cat "$OUT/bench.log"
fi
stamp "done"
