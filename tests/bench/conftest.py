"""pytest-benchmark suites: every benchmark races its anchor in the same run.

The machine-info hook stores the topology beside every figure, so a saved run says what it ran on.
"""


def pytest_benchmark_update_machine_info(config, machine_info):
    from sympathy.bench.core import versions
    from sympathy.topology import topology

    topo = topology(with_gpu=False)
    machine_info["sympathy_topology"] = {
        "cpu_model": topo.cpu_model,
        "physical_cores": topo.physical_cores,
        "caches": [f"L{c.level} {c.kind} {c.size_bytes // 1024} KiB" for c in topo.caches],
        "simd": list(topo.simd),
    }
    machine_info["sympathy_versions"] = versions()
