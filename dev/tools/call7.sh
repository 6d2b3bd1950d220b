#!/usr/bin/env bash
# dev: the GPU checks merged without a GPU (session 5): several hybrid / MTP sequences a context
# on the seqs variant (dev/tools/pack_b90.sh), then on the default library (they must skip there
# with the refusal), test_ops' mvq (1, 2, 4 rows a warp), then the MoE benchmark with what is left
export PYLLAMAKV_TEST_DEVICE=cuda
T0=$(date +%s)
LIB=/tmp/build-gpu/native/seqs/libllamakv.so BUDGET=240 STAGES="prebuilt pytest" \
    PYTESTS="tests/test_cuda_qwen35_multiseq.py tests/test_mtp_multiseq.py tests/test_budget_ubatch.py tests/test_server_pool.py" \
    bash tools/gpu-run.sh 2>&1 | grep -E "passed|failed|FAILED|skipped|rc=|Error" | tail -20
mkdir -p $OUT/a && mv $OUT/*.log $OUT/a/ 2>/dev/null
BUDGET=60 STAGES="prebuilt pytest" PYTESTS="tests/test_cuda_qwen35_multiseq.py tests/test_mtp_multiseq.py" \
    bash tools/gpu-run.sh 2>&1 | grep -E "passed|failed|rc=" | tail -4
L=$(( 575 - ($(date +%s) - T0) ))
BUDGET=$L STAGES="prebuilt llref moe" MOE_DEPTHS=8192,32768,131072 bash tools/gpu-run.sh 2>&1 | grep -v Warning | tail -20
