"""Fault injection for sympathy.Queue: 20 runs with pickled items and 20 with zero-copy frames, each killing
a random producer or consumer at a random point of the stream (queue_fault_runs.py says what a run does
and which outcomes are allowed). Two worker processes of 10 runs each (2 cores);
`python tests/stress/queue_fault_runs.py --runs N --seed S [--frames]` soaks longer."""
import pytest
from fault_workers import run_fault_workers, total_kills

pytestmark = pytest.mark.stress

RUNS = 20


@pytest.mark.parametrize("frames", [False, True])
def test_killing_a_random_queue_peer_loses_nothing_it_should_keep(frames):
    summaries = run_fault_workers("queue_fault_runs.py", RUNS, ["--frames"] if frames else [], 500 * frames)
    kills = total_kills(summaries)
    total = {key: sum(s[key] for s in summaries) for key in ("items", "abandoned", "lost")}
    print(f"{RUNS} runs{' with frames' if frames else ''}, kills {kills}, {total['items']} items verified, "
          f"{total['abandoned']} puts of dead producers abandoned, {total['lost']} records lost with dead consumers")
    failures = [f for s in summaries for f in s["failures"]]
    assert not failures, failures
    assert kills.get("producer", 0) and kills.get("consumer", 0)
