#!/bin/bash
# Issue 19's host run, every figure in one call (docs/pipeline.md, "The 16-core host, issue 19's
# third session"): the batched rows, what two threads cost (with and without the GIL handoff),
# frames against iceoryx2 and memcpy, the workers curve with real 50 us tasks, where a worker's time
# goes at 8 and 14 workers. Run from the project root, built in place; OUT names the folder the raw
# output goes to (the device sets it). About 100 s on the 16-core host.
set -u
OUT=${OUT:-/tmp/pipeline_host}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
step() { echo "== $(date -u +%H:%M:%S) $*"; }
{
  date -u; nproc; lscpu | grep -E "Model name|Socket|Core|Thread|MHz|L2|L3|NUMA node0"
  python3 -c "import sys, numpy, sympathy; print(sys.version.split()[0], 'numpy', numpy.__version__, sympathy.__file__)"
  python3 -c "import zmq, faster_fifo, iceoryx2; print('pyzmq', zmq.__version__, 'iceoryx2 ok')" 2>&1
} > "$OUT/host.txt" 2>&1
cat "$OUT/host.txt"

step "batched rows"
python3 scripts/ring_batched.py --repeat 5 2>&1 | tee "$OUT/batched.txt"
step "two threads: placements x waits, with and without the GIL handoff"
python3 scripts/ring_two_threads.py --repeat 5 --items 4000000 --waits blocking yield 2>&1 | tee "$OUT/two_threads.txt"
step "frames"
python3 scripts/pipeline_host.py --frames-rows "shared_memory" "iceoryx2" "sy.Queue put_array" "sy.RingBuffer" \
  -- --quiet --only frames --frames 48 --repeat 5 --out "$OUT/frames_json" 2>&1 | tee "$OUT/frames.txt"
cp "$OUT"/frames_json/pipeline/latest/pipeline.json "$OUT/frames.json" && rm -rf "$OUT/frames_json"  # 2 folders down at most come back
step "workers curve"
python3 scripts/pipeline_host.py --workers-rows "pyzmq" "sy.Queue" \
  -- --quiet --only workers --workers 1 2 4 8 14 --tasks 20000 --repeat 3 --out "$OUT/workers_json" 2>&1 | tee "$OUT/workers.txt"
cp "$OUT"/workers_json/pipeline/latest/pipeline.json "$OUT/workers.json" && rm -rf "$OUT/workers_json"
step "workers profile"
python3 scripts/workers_profile.py --workers 8 14 --tasks 20000 2>&1 | tee "$OUT/workers_profile.txt"
step "done"
