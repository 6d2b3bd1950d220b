#!/usr/bin/env bash
# dev: session 5, device call 1 (cold): mvq's rows-a-warp variants checked (test_ops mvq) and timed
# (cuda_bench at depth 512), the GPU tests never run (sampler chain, MoE every-expert case, hybrid
# with the chunked default, gemma3, greedy loop), then the 27B hybrid's 32K prompt (ttft)
export PYLLAMAKV_TEST_DEVICE=cuda
T0=$(date +%s)
BUDGET=200 STAGES="prebuilt llref mvq" MVQ_TYPES="12 23 14 13 18 11 2" bash tools/gpu-run.sh 2>&1 \
    | grep -vE "^\[|Warning" | tail -40
mkdir -p $OUT/a && mv $OUT/*.log $OUT/*.txt $OUT/a/ 2>/dev/null
BUDGET=170 STAGES="prebuilt pytest" PYTESTS="tests/test_sampler_loop.py tests/test_cuda_moe.py tests/test_cuda_qwen35.py tests/test_cuda_gemma3.py tests/test_greedy_loop.py" \
    bash tools/gpu-run.sh 2>&1 | grep -E "passed|failed|FAILED|rc=|Error" | tail -25
mkdir -p $OUT/b && mv $OUT/*.log $OUT/b/ 2>/dev/null
L=$(( 575 - ($(date +%s) - T0) ))
echo "ttft with ${L}s left"
BUDGET=$L STAGES="prebuilt llref ttft" TTFT_LENGTHS=32768 TTFT_CONFIGS=budget:16384,resident:4096 \
    bash tools/gpu-run.sh 2>&1 | grep -vE "Warning" | tail -16
