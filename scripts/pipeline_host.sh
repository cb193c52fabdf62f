#!/bin/bash
# Issue 19's host runs, every figure of a call in one script (docs/pipeline.md, "The 16-core host,
# issue 19's third session" and "... fourth session"). Run from the project root, built in place; OUT
# names the folder the raw output goes to (the device sets it). STEPS picks what runs, in this order:
#   host          the machine (CPU, caches, Python, NumPy, huge-page settings)
#   ab            before/after in one run: MAIN (a second tree, built in place) and this tree called
#                 alternately, REPS times each (scripts/pipeline_ab.py): 1080p and 64x48 frames
#                 (sympathy's zero-copy rows, iceoryx2 and memcpy beside this tree's) and the workers
#                 shape at AB_WORKERS (4) workers (the no-transport ceiling and sy.Queue, the same tasks
#                 in both)
#   workers_curve `sympathy bench pipeline --only workers` at CURVE workers with its anchors
#   profile       where a worker's time goes at PROFILE workers (scripts/workers_profile.py)
#   batched two_threads frames workers   the third session's steps
# The third session's call was `bash scripts/pipeline_host.sh` with the default STEPS (~100 s).
set -u
OUT=${OUT:-/tmp/pipeline_host}
STEPS=${STEPS:-"host batched two_threads frames workers profile"}
CURVE=${CURVE:-"1 2 4 8 14"}
PROFILE=${PROFILE:-"8 14"}
REPS=${REPS:-5}
AB_WORKERS=${AB_WORKERS-4}   # the ab step's worker counts ("" for frames only)
MAIN=${MAIN:-}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
step() { echo "== $(date -u +%H:%M:%S) $*"; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }

if has host; then
  {
    date -u; nproc; lscpu | grep -E "Model name|Socket|Core|Thread|MHz|L2|L3|NUMA node0"
    python3 -c "import sys, numpy, sympathy; print(sys.version.split()[0], 'numpy', numpy.__version__, sympathy.__file__)"
    python3 -c "import zmq, faster_fifo, iceoryx2; print('pyzmq', zmq.__version__, 'iceoryx2 ok')" 2>&1
    for f in enabled shmem_enabled; do echo "thp $f: $(cat /sys/kernel/mm/transparent_hugepage/$f 2>&1)"; done
    echo "nr_hugepages: $(cat /proc/sys/vm/nr_hugepages 2>&1)"; ldd --version | head -1
  } > "$OUT/host.txt" 2>&1
  cat "$OUT/host.txt"
fi

if has ab; then
  step "before/after: $MAIN (before) and $PWD (after), $REPS rounds, the order alternating"
  loops=$(python3 -c "from sympathy.bench.suites._pipeline_transports import busy_loop_count as b; print(b(50e-6))")
  echo "task: $loops loop iterations (50 us calibrated here, warm)"
  ab() {  # tree-name tree-path extra-rows...
    local name=$1 path=$2; shift 2
    PYTHONPATH=${PYTHONPATH_BASE:+$PYTHONPATH_BASE:}$path python3 scripts/pipeline_ab.py run --tree "$name" --out "$OUT/ab.jsonl" \
      --frame 1920x1080 64x48 --frames 48 --small-frames 3000 --frames-rows queue ring "$@" \
      --workers $AB_WORKERS --tasks 20000 --loops "$loops" --workers-rows ceiling sy.Queue
  }
  for r in $(seq "$REPS"); do
    if [ $((r % 2)) = 1 ]; then ab before "$MAIN"; ab after "$PWD" iceoryx2 memcpy; else ab after "$PWD" iceoryx2 memcpy; ab before "$MAIN"; fi
    echo "round $r done $(date -u +%H:%M:%S)"
  done
  python3 scripts/pipeline_ab.py summary "$OUT/ab.jsonl" | tee "$OUT/ab.txt"
fi

if has workers_curve; then
  step "workers curve: $CURVE workers"
  python3 scripts/pipeline_host.py --workers-rows "pyzmq" "sy.Queue" \
    -- --quiet --only workers --workers $CURVE --tasks 20000 --repeat 3 --out "$OUT/workers_json" 2>&1 | tee "$OUT/workers.txt"
  cp "$OUT"/workers_json/pipeline/latest/pipeline.json "$OUT/workers.json" && rm -rf "$OUT/workers_json"
fi

if has batched; then
  step "batched rows"
  python3 scripts/ring_batched.py --repeat 5 2>&1 | tee "$OUT/batched.txt"
fi
if has two_threads; then
  step "two threads: placements x waits, with and without the GIL handoff"
  python3 scripts/ring_two_threads.py --repeat 5 --items 4000000 --waits blocking yield 2>&1 | tee "$OUT/two_threads.txt"
fi
if has frames; then
  step "frames"
  python3 scripts/pipeline_host.py --frames-rows "shared_memory" "iceoryx2" "sy.Queue put_array" "sy.RingBuffer" \
    -- --quiet --only frames --frames 48 --repeat 5 --out "$OUT/frames_json" 2>&1 | tee "$OUT/frames.txt"
  cp "$OUT"/frames_json/pipeline/latest/pipeline.json "$OUT/frames.json" && rm -rf "$OUT/frames_json"  # 2 folders down at most come back
fi
if has workers; then
  step "workers curve"
  python3 scripts/pipeline_host.py --workers-rows "pyzmq" "sy.Queue" \
    -- --quiet --only workers --workers 1 2 4 8 14 --tasks 20000 --repeat 3 --out "$OUT/workers_json" 2>&1 | tee "$OUT/workers.txt"
  cp "$OUT"/workers_json/pipeline/latest/pipeline.json "$OUT/workers.json" && rm -rf "$OUT/workers_json"
fi
if has profile; then
  step "workers profile: $PROFILE workers"
  python3 scripts/workers_profile.py --workers $PROFILE --tasks 20000 2>&1 | tee "$OUT/workers_profile.txt"
fi
step "done"
