"""Smoke tests of the `sympathy` command line: every command answers --help and runs cheaply."""
import subprocess
import sys

import pytest

from sympathy.config import package_parent

from sympathy.cli import available_demos, build_parser, main


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


# ---- messages, usage errors, help ----------------------------------------------------------------
def _leaf_parsers():
    """(command words, parser) of every leaf command: bench suites, compare, cachegrind subjects ..."""
    import argparse

    found = []

    def walk(parser, words):
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            found.append((words, parser))
        for action in subs:
            for name, child in action.choices.items():
                walk(child, [*words, name])

    for command in ("bench", "cachegrind"):
        walk(build_parser([command]), [])
    return [(w, p) for w, p in found if w and w[0] in ("bench", "cachegrind") and len(w) > 1]


def test_every_option_has_help_and_no_default_is_shown_as_a_python_list():
    import re

    for words, parser in _leaf_parsers():
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"sympathy {' '.join(words)} {action.option_strings[0]} has no help"
        text = parser.format_help()
        assert not re.search(r"\(\d+, \d+|\[\d+, \d+|\('", text), f"sympathy {' '.join(words)} --help:\n{text}"
    lab_help = next(p for w, p in _leaf_parsers() if w == ["bench", "lab"]).format_help()
    assert "this VM" not in lab_help and "260 MiB" not in lab_help


def test_help_shows_defaults_as_they_are_typed():
    proc = run_cli("bench", "matmul", "--help")
    assert "(default: 512 2048)" in " ".join(proc.stdout.split())


def test_abbreviations_are_refused_with_the_usage_of_the_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "matmul", "--naive", "8"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "usage: sympathy bench matmul" in err and "unrecognized arguments: --naive 8" in err


def test_an_unknown_option_after_a_suite_prints_that_suites_usage():
    proc = run_cli("bench", "lab", "--bogus")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: sympathy bench lab") and "unrecognized arguments: --bogus" in proc.stderr


@pytest.mark.parametrize("words", [["cachegrind", "matmul"], ["bench", "matmul"]])
@pytest.mark.parametrize("spelling", ["--kernels", "--kernel"])
def test_kernels_is_spelled_the_same_in_bench_and_cachegrind(words, spelling):
    argv = [*words, spelling, "ijk", "packed"]
    assert build_parser(argv).parse_args(argv).kernels == ["ijk", "packed"]


@pytest.mark.parametrize("suite,default", [("attention-cpu", "no"), ("attention-gpu", "both")])
def test_causal_is_one_option_in_both_attention_suites(suite, default):
    def causal(*extra):
        argv = ["bench", suite, *extra]
        return build_parser(argv).parse_args(argv).causal

    assert causal() == default and causal("--causal") == "yes"
    assert causal("--causal", "both") == "both" and causal("--causal", "no") == "no"


def test_brackets_in_a_message_survive_rich(monkeypatch, capsys, tmp_path):
    # Without torch, attention-gpu must say `pip install ".[torch]"` whole, exit 1 and write no JSON.
    monkeypatch.setitem(sys.modules, "torch", None)
    assert main(["bench", "attention-gpu", "--out", str(tmp_path), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert '".[torch]"' in out and "Traceback" not in out
    assert not list(tmp_path.rglob("*.json"))


def test_attention_gpu_without_a_gpu_exits_1_and_writes_nothing(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    assert main(["bench", "attention-gpu", "--out", str(tmp_path), "--quiet"]) == 1
    assert "no" in capsys.readouterr().out and not list(tmp_path.rglob("*"))


def test_cachegrind_without_valgrind_is_one_line(monkeypatch, capsys):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["cachegrind", "matmul", "--n", "8"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "valgrind" in lines[0] and "apt-get install valgrind" in lines[0]


def test_a_matmul_too_large_for_memory_is_a_usage_error(monkeypatch, capsys):
    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("vm", (), {"available": 8 << 30})())
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "matmul", "--n", "100000"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "usage: sympathy bench matmul" in err
    assert "argument --n: n=100000 needs 372.5 GiB" in err and "8.0 GiB of memory is available" in err


# ---- run folders and compare ---------------------------------------------------------------------
def test_each_run_keeps_its_folder_latest_points_at_the_newest_and_compare_shows_both(tmp_path, capsys):
    argv = ["bench", "matmul", "--n", "16", "--kernels", "ijk", "packed", "--naive-max", "16", "--repeat", "1",
            "--quiet", "--plot", "--out", str(tmp_path)]
    assert main(argv) == 0 and main(argv) == 0
    runs = sorted(p for p in (tmp_path / "matmul").iterdir() if p.name != "latest")
    assert len(runs) == 2
    for run in runs:
        assert {p.name for p in run.iterdir()} == {"matmul.json", "matmul.png"}
    assert (tmp_path / "matmul" / "latest").resolve() == runs[1].resolve()
    capsys.readouterr()
    assert main(["bench", "compare", "matmul~1", "matmul", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "B vs A" in out and "packed" in out and "numpy (anchor)" in out
    assert main(["bench", "compare", str(runs[0]), str(runs[1] / "matmul.json"), "--out", str(tmp_path)]) == 0


def test_compare_of_a_run_that_does_not_exist_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "compare", "matmul~3", "matmul", "--out", str(tmp_path)])
    assert exit_.value.code == 2 and "no run of 'matmul'" in capsys.readouterr().err


# ---- demos: what they promise, what they show -----------------------------------------------------
def _demo(name):
    import importlib

    return importlib.import_module(f"sympathy.demos.{name}")


def test_attention_gpu_demo_promises_the_ladder_it_runs():
    demo = _demo("attention_gpu")
    summary = demo.__doc__.splitlines()[0]
    assert "climb to FlashAttention-2" not in summary and "Hopper" in summary and "cuDNN" in summary
    assert demo.rungs_for(64, hopper=True) == ["naive", "tiled", "mma", "hopper"]      # ends at our best rung
    assert demo.rungs_for(128, hopper=False) == ["naive", "tiled", "mma"]
    assert demo.rungs_for(256, hopper=True) == ["naive", "hopper"]
    times = {"torch SDPA flash (FA2)": 2.0, "torch SDPA cuDNN": 1.5, "hopper": 1.4, "mma": 1.9}
    assert demo.strongest_anchor(times) == "torch SDPA cuDNN"                         # ours never counts
    assert demo.strongest_anchor({"torch SDPA flash (FA2)": 2.0}) == "torch SDPA flash (FA2)"
    assert demo.strongest_anchor({"mma": 1.0}) is None


def test_attention_gpu_demo_without_torch_names_the_extra_whole(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    _demo("attention_gpu").main([])
    assert '".[torch]"' in capsys.readouterr().out


def test_attention_demo_without_torch_shows_no_torch_column():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from sympathy.cli import main; main(['demo', 'attention', '--no-plot'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=package_parent())
    assert proc.returncode == 0, proc.stderr
    assert "no anchor, so no × torch column" in proc.stdout and "× torch" not in proc.stdout.split("column")[-1]
