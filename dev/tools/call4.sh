#!/usr/bin/env bash
# dev: a short device call (cold start, little device time left): the gemma3 rope and chunked
# delta-rule fixes, then the 27B hybrid's 32K prompt in 16 GiB with the recurrence and the chunked form
export PYLLAMAKV_TEST_DEVICE=cuda
BUDGET=50 STAGES="prebuilt ops" OPS_FIRST="gemma,hybrid" OPS_FULL=0 bash tools/gpu-run.sh 2>&1 | grep -E "FAIL|passed|rc=|delta_rule \(27B|hybrid layer" | head -24
mkdir -p $OUT/a && mv $OUT/*.log $OUT/*.txt $OUT/a/ 2>/dev/null
BUDGET=60 STAGES="prebuilt pytest" PYTESTS="tests/test_cuda_gemma3.py tests/test_cuda_moe.py" \
    bash tools/gpu-run.sh 2>&1 | grep -E "passed|failed|FAILED|rc=" | tail -20
BUDGET=130 STAGES="prebuilt ttft" TTFT_LENGTHS=32768 TTFT_CONFIGS=budget:16384 bash tools/gpu-run.sh 2>&1 | tail -12
