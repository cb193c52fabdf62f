#!/bin/bash
# call 4 (2026-11-29f): wc (causal 80-query tiles at every length) against base at N = 8192 and 16384, two rounds, on the
# same warm machine (libraries in /tmp/abkeep from call 1).
. .device/bootstrap.sh > /dev/null 2>&1; ab() { SYMPATHY_CACHE_DIR=/tmp/abkeep/$1 timeout 100 python3 scripts/bwd_device.py --only-hopper --skip-check --dims 128 --sizes 8192 16384 > $OUT/ab16_$1_r$2.txt 2>&1; echo "$1 r$2 rc=$?"; grep -E "^ +128 +[0-9]+ +(True|False)" $OUT/ab16_$1_r$2.txt; }; ab wc 1; ab base 1; ab wc 2; ab base 2
