#!/bin/bash
# call 6 (2026-11-29i), on call 5's warm machine (libraries in /tmp/abkeep from call 5): five more rounds of final
# against w8 at the remaining cell, d = 64 N = 1024 (a first try without the bootstrap sourced failed to import and
# is not kept).
. .device/bootstrap.sh > /dev/null 2>&1; t0=$(date +%s); for round in 1 2 3 4 5; do for lib in final w8; do SYMPATHY_CACHE_DIR=/tmp/abkeep/$lib timeout 40 python3 scripts/hopper_check.py --sizes 1024 --head-dims 64 --kernels sdpa-cudnn hopper --repeat 2 --no-check > /tmp/c6_${lib}_r$round.txt 2>&1; echo "$lib r$round $(( $(date +%s) - t0 )) s"; grep -A4 "^| d | N" /tmp/c6_${lib}_r$round.txt | tail -2; cat /tmp/c6_${lib}_r$round.txt >> $OUT/ab_$lib.txt; [ $(( $(date +%s) - t0 )) -lt 150 ] || break 2; done; done
