"""scripts/ring_attention_multi.py, issue 23's multi-GPU run: its overlap reading of a profiler trace (pure Python),
and the whole script as its CPU dry run (2 gloo processes under torchrun), so the device run does not rot between
the sessions that get two GPUs."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sympathy as sy

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ring_attention_multi.py"
SY_PATH = os.path.dirname(os.path.dirname(os.path.abspath(sy.__file__)))   # the sympathy this test imports
HANG = 240   # far beyond what the dry run needs (~15 s here); reaching it is the failure


def _script():
    spec = importlib.util.spec_from_file_location("ring_attention_multi", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_overlap_splits_nccl_time_by_kind_into_hidden_and_exposed(tmp_path):
    us = lambda name, ts, dur, cat="kernel": dict(cat=cat, name=name, ts=ts, dur=dur)   # noqa: E731
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        us("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 0, 40),   # before any compute
        us("hopper_fwd_kernel", 50, 100),
        us("elementwise_kernel", 120, 60),                                                 # overlaps the first
        us("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 100, 200),         # 100..300: 80 hidden
        us("hopper_bwd_kernel", 250, 100),                                                 # 250..300 hides 50 more
        us("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 400, 30),          # after all compute
        us("cudaLaunchKernel", 100, 500, cat="cuda_runtime"),                              # not a kernel
    ]}))
    kinds = _script().overlap(trace)
    assert kinds.keys() == {"AllGather", "SendRecv"}
    assert kinds["AllGather"] == [1, pytest.approx(0.04), 0.0]
    n, ms, hidden = kinds["SendRecv"]
    assert n == 2 and ms == pytest.approx(0.23) and hidden == pytest.approx(0.13)


def test_the_cpu_dry_run_checks_the_ring_and_prints_its_table(tmp_path):
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1", PYTHONPATH=SY_PATH)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(SCRIPT),
           "--device", "cpu", "--sizes", "256", "--check-n", "256", "--reps", "1", "--skip-pytorch",
           "--out", str(tmp_path)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the dry run hung for {HANG} s: {exc.stdout!r} {exc.stderr!r}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "worst" in proc.stdout and ": ok" in proc.stdout, proc.stdout
    result = json.loads((tmp_path / "ring_multi_W2.json").read_text())
    assert result["world"] == 2 and result["check"]["ok"]
    assert len(result["check"]["errors"]) == 2 and max(max(e) for e in result["check"]["errors"]) < 1e-4
    (row,) = result["rows"]
    assert row["N"] == 256 and all(row[k] > 0 for k in ("ring_fwd_s", "ring_fb_s", "one_fwd_s", "one_fb_s"))
