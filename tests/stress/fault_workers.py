"""Runs a fault-injection script (ring_fault_runs.py, queue_fault_runs.py) in worker processes and
collects the JSON summary each prints last. Shared by the stress tests that drive them."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = 2   # the CI machine's cores


def run_fault_workers(script: str, runs: int, extra: list, seed_offset: int = 0) -> list:
    """`runs` runs split over WORKERS processes, worker w seeded 1000 w + seed_offset; every worker must
    exit 0 within 600 s (killed otherwise), and all runs must be reported."""
    workers = [subprocess.Popen([sys.executable, os.path.join(HERE, script), "--runs", str(runs // WORKERS),
                                 "--seed", str(1000 * w + seed_offset)] + extra,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for w in range(WORKERS)]
    summaries = []
    try:
        for worker in workers:
            out, err = worker.communicate(timeout=600)
            assert worker.returncode == 0, f"worker exit status {worker.returncode}:\n{out}\n{err}"
            summaries.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for worker in workers:
            worker.kill()
    assert sum(s["runs"] for s in summaries) == runs
    return summaries


def total_kills(summaries: list) -> dict:
    """Kills by role over all workers' summaries."""
    kills: dict = {}
    for s in summaries:
        for role, n in s["kills"].items():
            kills[role] = kills.get(role, 0) + n
    return kills
