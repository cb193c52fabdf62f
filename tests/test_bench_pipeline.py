"""`sympathy bench pipeline`: bad counts and sizes are argparse errors before any work; a tiny run
(not timed) fills every shape's rows, checks the data it moved, and keeps its run folder; a missing
anchor is a row saying how to install it, never a crash."""
import argparse
import json
import os
import subprocess
import sys

import pytest

from sympathy.bench.core import Results
from sympathy.bench.suites import _pipeline_transports as tr
from sympathy.bench.suites.pipeline import SUITE
from sympathy.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANG = 300  # seconds: the tiny run takes about 20 s on a loaded 2-core machine; past this it hung


@pytest.mark.parametrize("args, message", [
    (["--items", "0"], "argument --items: must be >= 1; got 0"),
    (["--frames", "-2"], "argument --frames: must be >= 1; got -2"),
    (["--tasks", "many"], "argument --tasks: must be an integer >= 1"),
    (["--workers", "2", "0"], "argument --workers: must be >= 1; got 0"),
    (["--repeat", "0"], "argument --repeat: must be >= 1; got 0"),
    (["--task-us", "-50"], "argument --task-us: must be >= 1; got -50"),
    (["--frame", "1920"], "argument --frame: must be WIDTHxHEIGHT"),
    (["--frame", "0x1080"], "argument --frame: width and height must be >= 1"),
    (["--frame", "3x1"], "argument --frame: width*height*3 must be a multiple of 8 bytes"),
    (["--only", "frames", "gpus"], "argument --only: invalid choice: 'gpus'"),
    (["--workers", "100000"], "--workers: at most"),
])
def test_bad_arguments_are_usage_errors(capsys, tmp_path, args, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "pipeline", "--out", str(tmp_path), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not any(tmp_path.iterdir())  # no run folder: nothing ran


def test_tiny_run_fills_every_shape(tmp_path):
    command = [sys.executable, "-m", "sympathy.cli", "bench", "pipeline", "--quiet", "--out", str(tmp_path),
               "--items", "300", "--frames", "4", "--frame", "64x32", "--tasks", "60", "--task-us", "20",
               "--workers", "1", "2", "--repeat", "1"]
    proc = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT, COLUMNS="200"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out, _ = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    data = json.loads((tmp_path / "pipeline" / "latest" / "pipeline.json").read_text())
    rows = {(r["group"].split(":")[0], r["variant"]): r for r in data["rows"]}
    groups = {g for g, _ in rows}
    assert {"objects", "frames", "workers"} <= groups
    assert len({r["group"] for r in data["rows"] if r["group"].startswith("workers")}) == 2  # 1 and 2 workers
    for (group, variant), row in rows.items():
        if "not installed" in variant:
            continue
        assert "failed" not in variant, (variant, data["notes"])  # every installed anchor ran here
        assert row["metrics"]["per s"] > 0, variant
    for group in ("objects", "frames", "workers"):  # ours, and the anchor every ratio is against
        assert (group, "sy.Queue") in rows
        assert (group, "multiprocessing.Queue") in rows and rows[(group, "multiprocessing.Queue")]["anchor"]
    assert ("frames", "sy.RingBuffer claim/view_batch (zero-copy)") in rows
    assert ("frames", "sy.RingBuffer claim/view_batch, yield wait (zero-copy)") in rows
    frames = [r for (g, _), r in rows.items() if g == "frames" and "GB/s" in r["metrics"]]
    assert all(0 < r["metrics"]["% memcpy"] for r in frames)
    workers = [r for (g, _), r in rows.items() if g == "workers"]
    assert all(r["metrics"]["x ideal"] > 0 for r in workers if "per s" in r["metrics"])
    left = [p for p in os.listdir("/dev/shm") if f"-{proc.pid}-" in p]  # sy.Queue's and the ring's segments
    assert left == [], left


def test_missing_anchor_is_a_row_not_a_crash():
    class Missing(tr.Transport):
        label = "some-anchor"
        needs = "sympathy_no_such_module"

    results = Results(SUITE, argparse.Namespace())
    rate = SUITE.measure(results, "objects: test", Missing, lambda: Missing().prepare("objects", 0, 1), 1, {})
    assert rate is None
    assert results.rows[-1].variant == f"some-anchor: {tr.INSTALL_HINT}"
    assert results.rows[-1].metrics == {}


def test_failing_anchor_says_why():
    def broken():
        raise OSError("no ipc here")

    results = Results(SUITE, argparse.Namespace())
    assert SUITE.measure(results, "objects: test", tr.Zmq, broken, 1, {}) is None
    assert results.rows[-1].variant.endswith("failed (OSError)")
    assert any("no ipc here" in note for note in results.notes)
