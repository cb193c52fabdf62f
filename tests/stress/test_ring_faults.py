"""Fault injection (issue 15): 100 runs per wait strategy, each killing a random peer (producer,
consumer or EventPoller handler) at a random moment; see ring_fault_runs.py for the run and the
allowed and forbidden outcomes. Two worker processes of 50 runs each per strategy (2 cores)."""
import json
import os
import subprocess
import sys

import pytest
from fault_workers import HERE, run_fault_workers, total_kills

pytestmark = pytest.mark.stress

RUNS = 100
CONTIGUOUS_RUNS = 40


@pytest.mark.parametrize("wait,layout,runs", [("busy_spin", "slots", RUNS), ("yield", "slots", RUNS),
                                             ("sleep", "slots", RUNS), ("blocking", "slots", RUNS),
                                             ("yield", "contiguous", CONTIGUOUS_RUNS),
                                             ("blocking", "contiguous", CONTIGUOUS_RUNS)])
def test_killing_a_random_peer_loses_no_live_item(wait, layout, runs):
    """The contiguous layout (headers apart from the items) with fewer runs: the liveness code is
    the same, only where a header sits differs."""
    summaries = run_fault_workers("ring_fault_runs.py", runs, ["--wait", wait, "--layout", layout])
    failures = [f for s in summaries for f in s["failures"]]
    kills = total_kills(summaries)
    print(f"{wait}, {layout}: {runs} runs, kills {kills}, {sum(s['items'] for s in summaries)} items verified, "
          f"{sum(s['lost'] for s in summaries)} sequences of dead producers skipped")
    assert not failures, failures
    assert kills.get("producer", 0) and kills.get("consumer", 0) and kills.get("handler", 0)


SHARED_LANE_RUNS = 10


@pytest.mark.parametrize("wait", ["busy_spin", "yield", "sleep", "blocking"])
def test_two_threads_on_one_producer_beside_a_dying_one(wait):
    """The two lanes of a producer record under faults (ring_shared_lane_runs.py): two threads
    publish through one multi-producer object while another producer dies inside a claim. Found a
    stall the single-threaded fault runs above cannot reach: the second thread's claim was counted
    open through its wait for space, under a floor below the dead claim (2 runs in 10, yield)."""
    worker = subprocess.Popen([sys.executable, os.path.join(HERE, "ring_shared_lane_runs.py"), "--wait", wait,
                               "--runs", str(SHARED_LANE_RUNS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = worker.communicate(timeout=600)
    finally:
        worker.kill()
    assert worker.returncode == 0, f"worker exit status {worker.returncode}:\n{out}\n{err}"
    summary = json.loads(out.strip().splitlines()[-1])
    print(f"{wait}: {summary['runs']} runs, {summary['items']} items verified, "
          f"{summary['lost']} sequences of dead producers skipped")
    assert summary["runs"] == SHARED_LANE_RUNS
    assert not summary["failures"], summary["failures"]
    assert summary["lost"] > 0  # the dying producer did die inside claims
