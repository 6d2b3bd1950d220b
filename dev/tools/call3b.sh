#!/usr/bin/env bash
# dev: the 27B hybrid's TTFT (default and chunked delta rule) beside llama-bench, then q4_0's per-token path
BUDGET=${TTFT_BUDGET:-380} STAGES="prebuilt llref ttft" TTFT_LENGTHS=${TTFT_LENGTHS:-32768} \
    TTFT_CONFIGS=${TTFT_CONFIGS:-budget:16384,resident:4096} bash tools/gpu-run.sh 2>&1 | tail -24
mv $OUT/ttft.log $OUT/ttft_1.log 2>/dev/null
BUDGET=${PROF_BUDGET:-150} STAGES="prebuilt profile" PROF_TYPES="q4_0:2" PROF_NOGRAPH=0 bash tools/gpu-run.sh 2>&1 | tail -30
