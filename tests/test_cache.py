import shutil

import pytest

import sympathy as sy
from sympathy.cache import CacheGeometry, parse_callgrind, simulated_geometry

SAMPLE = """\
version: 1
creator: callgrind-3.19.0
events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw
fn=(1) kernel
0 10 4 2 1 3 1 0 2 1
totals: 100 40 20 3 5 2 1 4 2
"""


def test_parse_callgrind_maps_totals_to_event_names():
    totals = parse_callgrind(SAMPLE)
    assert totals == {"Ir": 100, "Dr": 40, "Dw": 20, "I1mr": 3, "D1mr": 5, "D1mw": 2, "ILmr": 1,
                      "DLmr": 4, "DLmw": 2}


def test_parse_callgrind_without_events_is_an_error():
    with pytest.raises(RuntimeError, match="events"):
        parse_callgrind("totals: 1 2 3\n")


def test_simulated_geometry_has_power_of_two_sets():
    for geometry in simulated_geometry():
        sets = geometry.size_bytes // (geometry.ways * geometry.line_bytes)
        assert sets & (sets - 1) == 0


def test_cachegrind_without_valgrind_says_what_is_missing(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(sy.NotSupportedError, match="valgrind"):
        sy.cachegrind("x = 1")


def test_cachegrind_rejects_an_empty_call():
    with pytest.raises(ValueError, match="call"):
        sy.cachegrind("   ")


@pytest.mark.valgrind
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_streaming_over_a_large_array_misses_once_per_line():
    # Summing 8 MiB of float64 touches 131072 distinct 64-byte lines; a D1 of 48 KiB keeps none of
    # them, so the region must miss about once per line: the counts measure the kernel, not Python.
    d1 = CacheGeometry(32 * 1024, 8, 64)
    ll = CacheGeometry(1 << 20, 16, 64)
    report = sy.cachegrind("a.sum()", setup="import numpy as np; a = np.ones(1 << 20)", d1=d1, ll=ll)
    lines = (8 << 20) // 64
    assert lines <= report.d1_misses < 1.2 * lines
    assert report.d_refs >= 1 << 17
    assert 0 < report.d1_miss_rate < 1


def test_counters_either_count_or_say_why_not():
    try:
        counts = sy.counters(lambda: sum(range(100_000)), events=("instructions",))
    except sy.NotSupportedError as e:
        assert "unavailable" in str(e) and "errno" in str(e)
    else:
        assert counts["instructions"] > 100_000


def test_counters_reject_unknown_events():
    with pytest.raises(ValueError, match="events"):
        sy.counters(lambda: None, events=("bogus",))


@pytest.mark.valgrind
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="needs valgrind")
def test_an_exception_in_the_call_is_raised_with_the_childs_traceback():
    with pytest.raises(ZeroDivisionError) as info:
        sy.cachegrind("x = 1/0")
    assert "ZeroDivisionError" in str(info.value.__cause__) and "<call>" in str(info.value.__cause__)
    with pytest.raises(NameError, match="undefined_name"):
        sy.cachegrind("x = 1", setup="undefined_name")
