#!/bin/bash
# call 6 (2026-11-29f): ncu on the final library: our d = 128 backward (80-query tiles, N = 4096, not causal) beside
# cuDNN's, and PC sampling of ours (scripts/bwd_ncu.sh's header says what each part is).
. .device/bootstrap.sh > /dev/null 2>&1; export SYMPATHY_CACHE_DIR=$PWD/.xfer/abx/fin; timeout 420 sh scripts/bwd_ncu.sh $OUT 128 2>&1 | tail -60
