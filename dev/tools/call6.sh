#!/usr/bin/env bash
# dev: session 5, device call 2 (warm after call5.sh): decode through create_completion beside
# llama-bench per weight type at depth 512 (DEC_TYPES), on the library LIB (default: as built;
# /tmp/build-gpu/native/mvq2/libllamakv.so: mvq with 2 rows a warp)
export PYLLAMAKV_TEST_DEVICE=cuda
BUDGET=${BUDGET:-570} STAGES="prebuilt llref decode" DEC_TYPES=${DEC_TYPES:-q4_k,iq4_xs,q6_k,q5_k,iq3_xxs,q4_0} \
    DEC_DEPTHS=${DEC_DEPTHS:-512} bash tools/gpu-run.sh 2>&1 | grep -vE "Warning" | tail -30
