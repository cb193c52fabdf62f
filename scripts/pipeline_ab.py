"""Before/after in one run: `sympathy bench pipeline`'s own measurements (frames_rate, workers_rate,
ceiling_rate) of sympathy's rows, one run each, from whichever tree PYTHONPATH gives; a driver
calls it alternately with two trees and summarises (docs/pipeline.md, "Issue 19, fourth session").

    python scripts/pipeline_ab.py run --tree NAME --out FILE [--frames-rows ...] [--frame WxH ...] \
        [--frames N] [--workers N ...] [--tasks N] [--loops N] [--workers-rows ...]
    python scripts/pipeline_ab.py summary FILE...

`run` appends one JSON line per figure ({"tree", "shape", "row", "rate"}) to FILE; it uses only
what both trees have (the bench module's functions and transports as of c16c296), so the same
script measures the old tree and the new. `--loops` fixes the task's length (iterations of the
empty loop) so that both trees run the same tasks; without it, the task is calibrated here.
`summary` prints, per shape and row, the median of each tree and the ratio of the medians, and
each tree's rows over the anchors measured beside them.
"""
import argparse
import json
import statistics
import sys
import time

FRAME_ROWS = {"queue": "SyQueueFrames", "ring": "SyRingFrames", "iceoryx2": "Iceoryx2", "memcpy": None}
WORKER_ROWS = {"sy.Queue": "SyQueue", "ceiling": None, "pyzmq": "Zmq", "mp.Queue": "MpQueue", "mp.Pool": None}


def run(args) -> None:
    import numpy as np

    import sympathy
    from sympathy.bench.suites import _pipeline_transports as tr
    from sympathy.bench.suites import pipeline as pl

    out = open(args.out, "a")

    def emit(shape, row, rate):
        out.write(json.dumps({"tree": args.tree, "shape": shape, "row": row, "rate": rate, "t": time.time(),
                                "package": sympathy.__file__}) + "\n")
        out.flush()

    for frame in args.frame:
        width, height = (int(v) for v in frame.split("x"))
        src = np.random.default_rng(7).integers(0, 255, (height, width, 3), dtype=np.uint8)
        n = args.frames if width * height >= 1 << 20 else args.small_frames
        for row in args.frames_rows:
            if row == "memcpy":
                rate = pl.memcpy_bandwidth(src.nbytes) * 1e9 / src.nbytes
            else:
                rate = pl.frames_rate(getattr(tr, FRAME_ROWS[row]), n, src)
            emit(f"frames {frame}", row, rate)
    if args.workers:
        loops = args.loops or tr.busy_loop_count(args.task_us * 1e-6)
        for n in args.workers:
            for row in args.workers_rows:
                if row == "ceiling":
                    rate = pl.ceiling_rate(n, args.tasks, loops)
                elif row == "mp.Pool":
                    rate = pl.pool_rate(n, args.tasks, loops)
                else:
                    rate = pl.workers_rate(getattr(tr, WORKER_ROWS[row]), n, args.tasks, loops)
                emit(f"workers {n}", row, rate)
    out.close()


def summary(files) -> None:
    rows = [json.loads(line) for f in files for line in open(f)]
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    trees = list(dict.fromkeys(r["tree"] for r in rows))
    for tree in trees:
        print(f"{tree}: {sorted(set(r.get('package', '?') for r in rows if r['tree'] == tree))}")
    for shape in shapes:
        print(f"== {shape}")
        med = {}
        for row in dict.fromkeys(r["row"] for r in rows if r["shape"] == shape):
            cells = []
            for tree in trees:
                got = [r["rate"] for r in rows if r["shape"] == shape and r["row"] == row and r["tree"] == tree]
                if got:
                    med[tree, row] = statistics.median(got)
                    cells.append(f"{tree} {med[tree, row]:,.0f}/s (n={len(got)}, {min(got):,.0f}-{max(got):,.0f})")
            change = ""
            if len(trees) == 2 and all((t, row) in med for t in trees):
                change = f" | {trees[1]}/{trees[0]} {med[trees[1], row] / med[trees[0], row]:.3f}x"
            print(f"  {row:10s} " + "; ".join(cells) + change)
        for tree in trees:
            for ours in ("queue", "ring", "sy.Queue"):
                if (tree, ours) not in med:
                    continue
                against = [f"{med[tree, ours] / med[t2, a]:.3f}x {a} ({t2})" for t2 in trees
                           for a in ("iceoryx2", "memcpy", "ceiling", "pyzmq", "mp.Queue", "mp.Pool") if (t2, a) in med]
                print(f"  {tree} {ours}: " + ", ".join(against))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tree", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--frame", nargs="*", default=[], metavar="WxH")
    r.add_argument("--frames-rows", nargs="+", default=["queue", "ring"], choices=list(FRAME_ROWS))
    r.add_argument("--frames", type=int, default=48, help="frames a run, for frames of 1 Mpixel or more")
    r.add_argument("--small-frames", type=int, default=3000, help="frames a run, for smaller frames")
    r.add_argument("--workers", type=int, nargs="*", default=[])
    r.add_argument("--workers-rows", nargs="+", default=["ceiling", "sy.Queue"], choices=list(WORKER_ROWS))
    r.add_argument("--tasks", type=int, default=20000)
    r.add_argument("--task-us", type=float, default=50)
    r.add_argument("--loops", type=int, default=0)
    s = sub.add_parser("summary")
    s.add_argument("files", nargs="+")
    args = parser.parse_args()
    if args.command == "run":
        run(args)
    else:
        summary(args.files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
