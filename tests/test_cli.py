"""Smoke tests of the `sympathy` command line: every command answers --help and runs cheaply."""
import subprocess
import sys

import pytest

from sympathy.config import package_parent

from sympathy.cli import available_demos, main


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    # From the folder holding the sympathy under test (the install in CI, the checkout in
    # development), so `-m` imports that one and not a source tree in the current folder.
    return subprocess.run([sys.executable, "-m", "sympathy", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=package_parent())


@pytest.mark.parametrize("args", [[], ["info"], ["demo"], ["bench"], ["cachegrind"], ["build-cuda"]])
def test_help_everywhere(args):
    proc = run_cli(*args, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: sympathy" in proc.stdout


def test_info_prints_caches_and_line_size(capsys):
    assert main(["info", "--no-gpu"]) == 0
    out = capsys.readouterr().out
    assert "cache line" in out and "Caches" in out


def test_demo_list_names_every_demo(capsys):
    assert main(["demo", "--list"]) == 0
    out = capsys.readouterr().out
    for name in available_demos():
        assert name in out


def test_unknown_demo_is_refused_with_the_choices(capsys):
    assert main(["demo", "no-such-demo"]) == 2
    assert "choose from" in capsys.readouterr().out


def test_demo_info_runs(capsys):
    assert main(["demo", "info", "--no-gpu"]) == 0
    assert "This machine" in capsys.readouterr().out


def test_bench_help_lists_every_suite():
    from sympathy.bench import available_suites

    proc = run_cli("bench", "--help")
    assert proc.returncode == 0
    for name in available_suites():
        assert name in proc.stdout


def test_unknown_suite_is_an_argparse_error():
    proc = run_cli("bench", "no-such-suite")
    assert proc.returncode == 2 and "invalid choice" in proc.stderr


def test_every_demo_has_a_summary_line():
    for name, summary in available_demos().items():
        assert summary, f"demos/{name}.py needs a module docstring: its first line is the summary"
