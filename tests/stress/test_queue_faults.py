"""Fault injection for sympathy.Queue: 20 runs with pickled items and 20 with zero-copy frames, each killing
a random producer or consumer at a random point of the stream (queue_fault_runs.py says what a run does
and which outcomes are allowed). Two worker processes of 10 runs each (2 cores);
`python tests/stress/queue_fault_runs.py --runs N --seed S [--frames]` soaks longer."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.stress

RUNS = 20
WORKERS = 2
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("frames", [False, True])
def test_killing_a_random_queue_peer_loses_nothing_it_should_keep(frames):
    mode = ["--frames"] if frames else []
    workers = [subprocess.Popen([sys.executable, os.path.join(HERE, "queue_fault_runs.py"), "--runs",
                                 str(RUNS // WORKERS), "--seed", str(1000 * w + 500 * frames)] + mode,
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
    kills = {}
    for s in summaries:
        for role, n in s["kills"].items():
            kills[role] = kills.get(role, 0) + n
    total = {key: sum(s[key] for s in summaries) for key in ("items", "abandoned", "lost")}
    print(f"{RUNS} runs{' with frames' if frames else ''}, kills {kills}, {total['items']} items verified, "
          f"{total['abandoned']} puts of dead producers abandoned, {total['lost']} records lost with dead consumers")
    assert sum(s["runs"] for s in summaries) == RUNS
    failures = [f for s in summaries for f in s["failures"]]
    assert not failures, failures
    assert kills.get("producer", 0) and kills.get("consumer", 0)
