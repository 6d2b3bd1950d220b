#!/usr/bin/env bash
# dev: this session's third device call (checks of the rope / smem fixes, the MoE gap, q4_K decode variants, the 27B TTFT)
export PYLLAMAKV_TEST_DEVICE=cuda
BUDGET=70 STAGES="prebuilt llref ops" OPS_FIRST="gemma,pick,hybrid" OPS_FULL=0 bash tools/gpu-run.sh 2>&1 | tail -40
mkdir -p $OUT/a && mv $OUT/*.log $OUT/*.txt $OUT/a/ 2>/dev/null
BUDGET=80 STAGES="prebuilt pytest" PYTESTS="tests/test_cuda_gemma3.py tests/test_cuda_moe.py tests/test_greedy_loop.py" \
    bash tools/gpu-run.sh 2>&1 | grep -E "passed|failed|FAILED|rc=" | tail -25
mv $OUT/pytest.log $OUT/a/pytest3.log 2>/dev/null
echo "== diag"; PYLLAMAKV_LIBRARY=/tmp/build-gpu/native/libllamakv.so PYTHONPATH=/tmp/site:$PWD timeout 60 python3 dev/tools/moe_gemma_diag.py 2>&1 | grep -v Warn | tail -12
echo "== cuda_bench q4_K depth 0: default, op by op, mvq_q8, matvec_q8"
BENCH_NO_PP=1 BENCH_PICK=0,7,5 timeout 55 /tmp/build-gpu/native/cuda_bench 12 8 0 2>&1 | grep -E "tg|^--" | head -12
[[ ${TTFT_BUDGET:-300} == 0 ]] || BUDGET=${TTFT_BUDGET:-300} STAGES="prebuilt llref ttft" TTFT_LENGTHS=32768 \
    TTFT_CONFIGS=budget:16384,resident:4096 bash tools/gpu-run.sh 2>&1 | tail -24
