"""`sympathy bench pipeline` with fewer rows: the host runs' driver (docs/pipeline.md, "The 16-core
host, issue 19's third session"), where device time is counted in seconds.

    python scripts/pipeline_host.py [--workers-rows mp.Queue pyzmq sy.Queue] [--frames-rows ...] -- BENCH ARGS

Everything after `--` goes to `sympathy bench pipeline` as typed there; the two options name the
transports of the workers and frames shapes to run (by label prefix; the default is the suite's
own full list). multiprocessing.Queue always runs: every ratio is against it, and the workers shape
runs multiprocessing.Pool beside it.
"""
import argparse
import sys

from sympathy.bench.suites import _pipeline_transports as tr
from sympathy.bench.suites import pipeline
from sympathy.cli import main as cli_main


def pick(available: tuple, prefixes: list[str] | None) -> tuple:
    if not prefixes:
        return available
    chosen = tuple(t for t in available if t is tr.MpQueue or any(t.label.startswith(p) for p in prefixes))
    unknown = [p for p in prefixes if not any(t.label.startswith(p) for t in available)]
    if unknown:
        raise SystemExit(f"no transport's label starts with {unknown}; labels: {[t.label for t in available]}")
    return chosen


def main() -> int:
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers-rows", nargs="+", metavar="LABEL")
    parser.add_argument("--frames-rows", nargs="+", metavar="LABEL")
    args = parser.parse_args(argv[:cut])
    pipeline.WORKERS = pick(pipeline.WORKERS, args.workers_rows)
    pipeline.FRAMES = pick(pipeline.FRAMES, args.frames_rows)
    return cli_main(["bench", "pipeline", *argv[cut + 1:]])


if __name__ == "__main__":
    sys.exit(main())
