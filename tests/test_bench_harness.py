import argparse
import json

import pytest

from sympathy.bench import Suite, run_suite, time_call
from sympathy.bench.core import available_suites, format_figure


class ToySuite(Suite):
    name = "toy"
    title = "toy suite"
    primary = "ops/s"
    higher_is_better = True

    def run(self, args, results):
        for n in results.progress([1, 2], desc="toy"):
            results.add(f"n={n}", "anchor", anchor=True, params={"n": n}, **{"ops/s": 100.0 * n})
            results.add(f"n={n}", "fast", params={"n": n}, **{"ops/s": 250.0 * n, "time_s": 0.1})
            results.add(f"n={n}", "no-figure", params={"n": n}, time_s=1.0)


class LowerIsBetter(ToySuite):
    primary = "time_s"
    higher_is_better = False

    def run(self, args, results):
        results.add("g", "anchor", anchor=True, time_s=2.0)
        results.add("g", "twice as fast", time_s=1.0)


def test_ratios_are_against_the_anchor_of_the_same_group():
    results = run_suite(ToySuite(), argparse.Namespace(), quiet=True)
    ratios = {(r.group, r.variant): r.ratio for r in results.rows}
    assert ratios[("n=1", "anchor")] == pytest.approx(1.0)
    assert ratios[("n=2", "fast")] == pytest.approx(2.5)
    assert ratios[("n=1", "no-figure")] is None


def test_lower_is_better_inverts_the_ratio():
    results = run_suite(LowerIsBetter(), argparse.Namespace(), quiet=True)
    assert results.rows[1].ratio == pytest.approx(2.0)


def test_json_records_machine_versions_rows_and_ratios(tmp_path):
    results = run_suite(ToySuite(), argparse.Namespace(sizes=[1, 2]), quiet=True)
    data = json.loads(results.write_json(tmp_path / "toy.json").read_text())
    assert data["suite"] == "toy" and data["primary_metric"] == "ops/s"
    assert data["machine"]["logical_cpus"] >= 1 and "numpy" in data["versions"]
    assert data["args"] == {"sizes": [1, 2]}
    assert [r["ratio"] for r in data["rows"]][:2] == [1.0, 2.5]


def test_table_and_plot(tmp_path):
    suite = ToySuite()
    results = run_suite(suite, argparse.Namespace(), quiet=True)
    assert results.table().row_count == 6
    (png,) = suite.plot(results, tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_time_call_batches_short_calls_and_reports_per_call_time():
    calls = []
    timing = time_call(lambda: calls.append(1), repeat=3, min_seconds=0.001)
    assert len(timing.samples) == 3 and timing.median > 0
    assert len(calls) > 3, "a call this short must be repeated inside each sample"


def test_time_call_runs_setup_before_every_sample():
    fresh = []
    time_call(lambda: None, repeat=4, warmup=1, setup=lambda: fresh.append(1))
    assert len(fresh) == 5


def test_time_call_rejects_zero_repeats():
    with pytest.raises(ValueError, match="repeat"):
        time_call(lambda: None, repeat=0)


@pytest.mark.parametrize("value,text", [(1.5e9, "1.50 G"), (2.5e6, "2.50 M"), (12345, "12,345"), (0.5, "0.500")])
def test_format_figure(value, text):
    assert format_figure(value) == text


def test_every_shipped_suite_is_discoverable():
    suites = available_suites()
    for name, suite in suites.items():
        assert suite.name == name and suite.title


def test_table_hides_columns_no_row_fills_and_the_ratio_without_an_anchor():
    class Sparse(ToySuite):
        columns = ("time_s", "D1_misses")

        def run(self, args, results):
            results.add("g", "a", time_s=1.0)

    table = run_suite(Sparse(), argparse.Namespace(), quiet=True).table()
    assert [c.header for c in table.columns] == ["group", "variant", "time_s"]


def test_run_folders_get_a_suffix_within_one_second_and_latest_moves(tmp_path):
    import datetime as dt

    from sympathy.bench import runs

    when = dt.datetime(2026, 11, 24, 11, 20, 5, tzinfo=dt.timezone.utc)
    first, second = runs.new_run_dir(tmp_path, "toy", when), runs.new_run_dir(tmp_path, "toy", when)
    assert (first.name, second.name) == ("2026-11-24T11-20-05Z", "2026-11-24T11-20-05Z-2")
    runs.mark_latest(first)
    runs.mark_latest(second)
    assert (tmp_path / "toy" / "latest").resolve() == second.resolve()
    assert runs.runs_of(tmp_path, "toy") == [first, second]


def test_compare_rows_say_which_run_is_better_whichever_way_the_metric_points(tmp_path):
    from sympathy.bench import runs

    a = run_suite(LowerIsBetter(), argparse.Namespace(), quiet=True).as_json()
    b = json.loads(json.dumps(a))
    b["rows"][1]["metrics"]["time_s"] = 0.5                      # "twice as fast" got twice faster again
    b["rows"].append({"group": "g", "variant": "new", "metrics": {"time_s": 3.0}, "anchor": False, "ratio": None})
    rows = {r["variant"]: r for r in runs.compare_rows(a, b)}
    assert rows["twice as fast"]["change"] == pytest.approx(2.0) and rows["anchor"]["change"] == pytest.approx(1.0)
    assert rows["new"]["a"] is None and rows["new"]["change"] is None
    b["versions"]["numpy"] = "0.0"
    assert any(note.startswith("numpy:") for note in runs.differences(a, b))


def test_resolve_refuses_a_file_that_is_not_a_bench_json(tmp_path):
    from sympathy.bench import runs

    (tmp_path / "other.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a sympathy bench JSON"):
        runs.load(runs.resolve(str(tmp_path / "other.json"), tmp_path))
