import os

import pytest

import sympathy as sy
from sympathy.topology import _cpu_list_len, _parse_size


def test_topology_reads_sysfs_caches():
    topo = sy.topology(with_gpu=False)
    assert topo.logical_cpus == os.cpu_count()
    assert topo.line_bytes in (32, 64, 128, 256)
    if os.path.isdir("/sys/devices/system/cpu/cpu0/cache"):
        l1 = topo.cache(1)
        assert l1 is not None and l1.kind == "Data" and l1.size_bytes >= 4096
        sizes = [c.size_bytes for c in topo.caches if c.kind != "Instruction"]
        assert sizes == sorted(sizes), "each level should be at least as large as the one before"


def test_peak_is_fma_width_times_two_ports_times_clock():
    topo = sy.topology(with_gpu=False)
    peak64, peak32 = topo.peak_gflops("float64"), topo.peak_gflops("float32")
    if peak64 is None:
        pytest.skip("clock unknown on this machine")
    assert peak32 == pytest.approx(2 * peak64)
    assert topo.peak_gflops("float64", threads=2) == pytest.approx(2 * peak64)


@pytest.mark.parametrize("text,expected", [("48K", 48 << 10), ("2048K", 2 << 20), ("1M", 1 << 20), ("512", 512)])
def test_parse_size(text, expected):
    assert _parse_size(text) == expected


@pytest.mark.parametrize("text,expected", [("0", 1), ("0-1", 2), ("0,2-5,7", 6)])
def test_cpu_list_len(text, expected):
    assert _cpu_list_len(text) == expected
