"""`sympathy demo pipeline` exits on the first Ctrl-C, in either of its runs, leaving no process and no
shared-memory segment behind; a short run completes with every result delivered once. The demo runs
in a child process (its own session), and SIGINT goes to its whole process group, as a terminal's
Ctrl-C does."""
import glob
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANG = 60  # seconds: a demo still running then is hung, which is a failure
SMALL = ["--width", "320", "--height", "240", "--workers", "2"]


def start_demo(*args):
    env = dict(os.environ, PYTHONPATH=ROOT, COLUMNS="160")
    return subprocess.Popen([sys.executable, "-m", "sympathy.cli", "demo", "pipeline", *SMALL, *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def children_of(pid: int) -> set[int]:
    try:
        return {c.pid for c in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def wait_for_run(pid: int, not_these: set[int] = frozenset()) -> set[int]:
    """The pids of a running pipeline (producer + 2 workers) other than `not_these`."""
    deadline = time.monotonic() + HANG
    while time.monotonic() < deadline:
        kids = children_of(pid) - set(not_these)
        if len(kids) >= 3:
            return kids
        time.sleep(0.05)
    pytest.fail(f"the demo started no pipeline in {HANG} s")


def segments(pid: int) -> list[str]:
    return glob.glob(f"/dev/shm/sympathy-queue-{pid}-*")


@pytest.mark.parametrize("run", [0, 1, 2], ids=["multiprocessing.Queue", "sympathy.Queue", "zero-copy frames"])
def test_first_ctrl_c_ends_the_demo(run):
    proc = start_demo("--seconds", "3")
    try:
        seen: set[int] = set()
        for _ in range(run + 1):  # the pipelines run one after the other, each with new children
            kids = wait_for_run(proc.pid, not_these=seen)
            seen |= kids
        time.sleep(0.5)  # frames are flowing
        os.killpg(proc.pid, signal.SIGINT)  # once, to the whole group
        out, _ = proc.communicate(timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail("the demo was still running long after one Ctrl-C")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    assert "interrupted" in out and "Traceback" not in out, out
    for pid in kids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    assert segments(proc.pid) == []


def test_short_run_delivers_every_result_once():
    proc = start_demo("--seconds", "0.5")
    try:
        out, _ = proc.communicate(timeout=HANG)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out
    assert "Every result came once per frame: yes" in out, out
    assert "multiprocessing.Queue" in out and "sympathy.Queue" in out and "sympathy.Queue zero-copy" in out
    assert segments(proc.pid) == []
