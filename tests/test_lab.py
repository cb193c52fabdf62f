"""The cache-line lab: every kernel's result is exact, the plateau logic is right on synthetic
curves, and bad input is refused before any C runs. No test looks at a clock's value."""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sympathy as sy
from sympathy import lab

KiB, MiB = lab.KiB, lab.MiB
USABLE = sorted(os.sched_getaffinity(0))


@pytest.fixture
def no_c(monkeypatch):
    """Any call that reaches the compiled kernels fails the test: validation must come first."""
    def refuse():
        raise AssertionError("C was reached before the argument was rejected")

    monkeypatch.setattr(lab._common, "_native", refuse)


def test_registered_on_the_package():
    assert sy.lab is lab


# ---- false sharing ------------------------------------------------------------------------------
@pytest.mark.parametrize("spacing", [8, 64, 128])
@pytest.mark.parametrize("pin", [True, False])
@pytest.mark.parametrize("increment", lab.INCREMENTS)
def test_false_sharing_counts_add_up(spacing, pin, increment):
    r = lab.false_sharing(threads=2, spacing=spacing, increment=increment, iterations=200_000, pin=pin)
    assert r.counts == (200_000, 200_000)
    assert (r.spacing, r.pinned, r.increment) == (spacing, pin, increment) and r.ns_per_op > 0
    assert len(r.on_cpu) == 2 and all(0 < t <= r.seconds * 1.01 for t in r.on_cpu)
    assert len(r.finished) == 2 and max(r.finished) == pytest.approx(r.seconds)
    assert 0 < r.concurrency <= 1.0


@settings(max_examples=12, deadline=None)
@given(threads=st.integers(1, 6), words=st.integers(1, 20), iterations=st.integers(1, 20_000),
       increment=st.sampled_from(lab.INCREMENTS))
def test_false_sharing_any_team(threads, words, iterations, increment):
    r = lab.false_sharing(threads=threads, spacing=8 * words, increment=increment, iterations=iterations)
    assert r.counts == (iterations,) * threads


def test_padded_means_a_line_pair():
    assert lab.false_sharing(padded=True, iterations=1000).spacing == 128
    assert lab.false_sharing(padded=False, iterations=1000).spacing == 8


def test_false_sharing_explicit_cpus():
    cpus = [USABLE[0]] * 3
    assert lab.false_sharing(threads=3, iterations=1000, pin=cpus).counts == (1000,) * 3


def test_false_sharing_sweep_rejects(no_c):
    with pytest.raises(ValueError, match=r"min_concurrency must be in \[0, 1\]"):
        lab.false_sharing_sweep(min_concurrency=1.5)
    with pytest.raises(ValueError, match="must each name at least one case"):
        lab.false_sharing_sweep(spacings=())
    with pytest.raises(ValueError, match="spacing must be a multiple of 8"):
        lab.false_sharing_sweep(spacings=(8, 12))


def test_false_sharing_sweep_slowdown_is_relative_to_widest_spacing():
    rows = lab.false_sharing_sweep(threads=2, spacings=(8, 128), pins=(True, False), iterations=10_000, repeat=2,
                                   min_concurrency=0.0)
    assert [(r.increment, r.pinned, r.spacing) for r, _ in rows] == [
        (op, pin, s) for op in lab.INCREMENTS for pin in (True, False) for s in (8, 128)]
    for (r, slowdown), (wide, one) in zip(rows[::2], rows[1::2]):
        assert one == 1.0 and slowdown == pytest.approx(r.seconds / wide.seconds)


@pytest.mark.parametrize("kwargs, message", [
    ({"threads": 0}, r"threads must be in \[1, 256\]; got 0"),
    ({"threads": 257}, r"threads must be in \[1, 256\]"),
    ({"spacing": 12}, r"spacing must be a multiple of 8"),
    ({"spacing": 4}, r"spacing must be in \[8, 1048576\]"),
    ({"iterations": 0}, r"iterations must be in \[1,"),
    ({"increment": "cas"}, r"increment must be one of \('store', 'rmw'\)"),
    ({"padded": True, "spacing": 64}, r"give padded=True or spacing, not both"),
    ({"threads": 2, "pin": [USABLE[0]]}, r"pin must list one CPU per thread \(2\); got 1"),
    ({"threads": 1, "pin": [os.cpu_count()]}, r"pin\[i\] must be in"),
])
def test_false_sharing_rejects(no_c, kwargs, message):
    with pytest.raises(ValueError, match=message):
        lab.false_sharing(**kwargs)


@pytest.mark.parametrize("threads", [2.0, True, "2"])
def test_false_sharing_threads_must_be_int(no_c, threads):
    with pytest.raises(TypeError, match="threads must be an int"):
        lab.false_sharing(threads=threads)


# ---- the counter loop ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", lab.COUNTER_KINDS)
def test_every_counter_kind_counts_exactly(kind):
    r = lab.counter(kind, iterations=123_457)
    assert (r.kind, r.final_value) == (kind, 123_457)
    assert r.ns_per_increment > 0


def test_atomic_is_seq_cst():
    assert lab.counter("atomic", iterations=10).kind == "atomic_seq_cst"


def test_counter_rejects(no_c):
    with pytest.raises(ValueError, match="kind must be one of"):
        lab.counter("volatile_ish")
    with pytest.raises(ValueError, match=r"iterations must be in \[1,"):
        lab.counter("register", iterations=0)


# ---- visibility ---------------------------------------------------------------------------------
def test_acquire_reader_sees_the_store():
    r = lab.visibility("acquire", timeout=10.0, delay=0.01)
    assert r.saw_store and not r.timed_out
    assert r.store_to_seen_ns >= 0
    assert "saw the store" in r.describe()


def test_plain_reader_matches_its_machine_code():
    """GCC hoists the plain load: the loop jumps to itself and the child must be killed. A compiler
    that re-loads the flag would let it see the store; either way code and behaviour must agree."""
    loop = lab.spin_loop_disassembly("plain")
    r = lab.visibility("plain", timeout=0.5, delay=0.01)
    if loop.spins_in_place:
        assert r.timed_out and not r.saw_store and r.store_to_seen_ns is None
        assert "killed" in r.describe()
    else:
        assert not r.timed_out


def test_acquire_loop_reloads_the_flag():
    loop = lab.spin_loop_disassembly("acquire")
    assert not loop.spins_in_place
    assert loop.function == "sy_lab_spin_acquire" and loop.text


def test_jump_to_itself_detection():
    assert lab._jumps_to_itself("    2c16:\tjmp    2c16 <sy_lab_spin_plain+0x6>")
    assert not lab._jumps_to_itself("    2c14:\tjne    2c20 <sy_lab_spin_plain+0x10>")
    assert not lab._jumps_to_itself("    2c16:\tjmp    2c10 <sy_lab_spin_plain>")


def test_visibility_rejects(no_c):
    with pytest.raises(ValueError, match="reader must be one of"):
        lab.visibility("relaxed")
    with pytest.raises(ValueError, match=r"timeout must be in \(0, 60\]"):
        lab.visibility("plain", timeout=0)
    with pytest.raises(ValueError, match="reader must be one of"):
        lab.spin_loop_disassembly("volatile")


# ---- the pointer chase --------------------------------------------------------------------------
def _next_indices(walk: lab.Chase) -> np.ndarray:
    """Each node's successor as an index, read from the addresses the C stored."""
    words = walk.buffer.view(np.uint64)[:: walk.node_bytes // 8]
    return ((words - np.uint64(walk.buffer.ctypes.data)) // np.uint64(walk.node_bytes)).astype(np.int64)


@settings(max_examples=25, deadline=None)
@given(nodes=st.integers(1, 3000), node_bytes=st.sampled_from([8, 16, 64, 128]), seed=st.integers(0, 2**64 - 1))
def test_random_chase_is_one_cycle_through_every_node(nodes, node_bytes, seed):
    walk = lab.build_chase(nodes * node_bytes, "random", node_bytes, seed, huge_pages=False)
    assert walk.nodes == nodes and not walk.buffer.flags.writeable
    nxt = _next_indices(walk)
    assert sorted(nxt.tolist()) == list(range(nodes))          # a permutation
    node, seen = 0, 0
    while True:                                                  # ... with a single cycle
        node, seen = nxt[node], seen + 1
        if node == 0:
            break
    assert seen == nodes
    assert lab.chase_cycle_length(walk) == nodes
    if nodes > 1:
        assert (nxt != np.arange(nodes)).all()                  # Sattolo: no node points at itself


def test_sequential_chase_links_neighbours():
    walk = lab.build_chase(8 * KiB, "sequential")
    nodes = 8 * KiB // 64
    assert _next_indices(walk).tolist() == [(i + 1) % nodes for i in range(nodes)]


def test_walk_ends_where_the_links_say():
    walk = lab.build_chase(64 * KiB, "random", seed=7)
    nxt = _next_indices(walk)
    node = 0
    for _ in range(1001):
        node = nxt[node]
    ns, end = lab.chase(walk, 1001)
    assert end == node * 64 and ns > 0


def test_seed_decides_the_permutation():
    a = _next_indices(lab.build_chase(64 * KiB, seed=1))
    b = _next_indices(lab.build_chase(64 * KiB, seed=1))
    c = _next_indices(lab.build_chase(64 * KiB, seed=2))
    assert (a == b).all() and (a != c).any()


def test_cycle_length_spots_a_broken_chain():
    walk = lab.build_chase(4 * KiB, "sequential")
    walk.buffer.flags.writeable = True                                  # corrupt it on purpose
    walk.buffer.view(np.uint64)[8 * 10] = walk.buffer.ctypes.data + 64 * 5    # node 10 → node 5: a short loop
    assert lab.chase_cycle_length(walk) == 0
    walk.buffer.view(np.uint64)[8 * 10] = 12345                         # a link out of the buffer
    assert lab.chase_cycle_length(walk) == 0


def test_chase_accepts_only_a_chase(no_c):
    with pytest.raises(TypeError, match="expected a Chase from build_chase"):
        lab.chase(np.zeros(4096, np.uint8), 10)
    with pytest.raises(TypeError, match="expected a Chase"):
        lab.chase_cycle_length(np.zeros(4096, np.uint8))


def test_huge_page_buffer_is_aligned():
    walk = lab.build_chase(3 * MiB)
    assert walk.buffer.ctypes.data % lab.HUGE_PAGE == 0
    assert lab.chase_cycle_length(walk) == 3 * MiB // 64


def test_latency_curve_small():
    curve = lab.latency_curve([4 * KiB, 16 * KiB], loads=1000, repeat=2)
    assert curve.sizes == [4 * KiB, 16 * KiB] and len(curve.ns_per_load) == 2
    assert all(ns > 0 for ns in curve.ns_per_load)


def test_default_sizes_two_per_octave():
    assert lab.default_sizes(64 * KiB) == [4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152, 65536]
    sizes = lab.default_sizes(256 * MiB)
    assert sizes[0] == 4 * KiB and sizes[-1] == 256 * MiB


@pytest.mark.parametrize("call, error, message", [
    (lambda: lab.latency_curve([1024]), ValueError, r"sizes\[i\] must be in \[4096,"),
    (lambda: lab.latency_curve([32 * 2**30]), ValueError, r"sizes\[i\] must be in \[4096, 17179869184\]"),
    (lambda: lab.latency_curve([]), ValueError, "at least one working-set size"),
    (lambda: lab.latency_curve([8192], pattern="zigzag"), ValueError, "pattern must be one of"),
    (lambda: lab.latency_curve([8192], loads=0), ValueError, r"loads must be in \[1,"),
    (lambda: lab.build_chase(8192, node_bytes=12), ValueError, "node_bytes must be a multiple of 8"),
    (lambda: lab.default_sizes(1024), ValueError, r"max_bytes must be in \[4096,"),
])
def test_latency_rejects(no_c, call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- plateau detection on synthetic curves ------------------------------------------------------
SYSFS = {"L1": 48 * KiB, "L2": 2 * MiB, "L3": 32 * MiB}


def staircase(sizes, noise=0.0, seed=0):
    """An idealised latency curve: 1.5 ns in L1, 5 in L2, 20 in L3, 90 in DRAM; one transition
    point half way (on a log scale) into each next level, as a real curve shows."""
    rng = np.random.default_rng(seed)
    out = []
    for s in sizes:
        if s <= 48 * KiB:
            ns = 1.5
        elif s <= 2 * MiB:
            ns = 5.0 if s > 64 * KiB else 3.0
        elif s <= 32 * MiB:
            ns = 20.0 if s > 3 * MiB else 11.0
        else:
            ns = 90.0 if s > 48 * MiB else 50.0
        out.append(ns * (1 + noise * rng.uniform(-1, 1)))
    return out


@pytest.mark.parametrize("noise, seed", [(0.0, 0), (0.08, 1), (0.08, 2), (0.1, 3)])
def test_plateaus_of_a_staircase(noise, seed):
    sizes = lab.default_sizes(512 * MiB)
    ns = staircase(sizes, noise, seed)
    plateaus = lab.detect_plateaus(sizes, ns)
    assert [round(p.ns / 5) * 5 if p.ns > 3 else 1.5 for p in plateaus] == [1.5, 5, 20, 90]
    assert [p.last_bytes for p in plateaus] == [48 * KiB, 2 * MiB, 32 * MiB, 512 * MiB]
    matches = lab.match_cache_levels(sizes, ns, SYSFS)
    assert [m.level for m in matches] == ["L1", "L2", "L3", "DRAM"]
    assert [m.ratio for m in matches[:3]] == [1.0, 1.0, 1.0]
    assert all(m.agrees for m in matches)
    assert matches[3].plateau.first_bytes > 32 * MiB


def test_capacity_is_half_way_up_the_step():
    """A gradual rise: points still below the geometric mean of the two plateaus count as fitting."""
    sizes = [16 * KiB * 2**k for k in range(9)]          # 16 KiB .. 4 MiB
    ns = [2.0, 2.0, 2.0, 2.0, 3.0, 5.0, 20.0, 20.0, 20.0]   # half way (log): sqrt(2 * 20) = 6.3
    (l1, dram) = lab.match_cache_levels(sizes, ns, {"L1": 512 * KiB})
    assert l1.plateau.last_bytes == 128 * KiB and l1.capacity_bytes == 512 * KiB and l1.ratio == 1.0
    assert dram.plateau.first_bytes == 1 * MiB and dram.agrees


def test_a_spike_does_not_split_a_plateau():
    sizes = [4 * KiB * 2**k for k in range(8)]
    ns = [1.5, 1.5, 1.5, 6.0, 6.1, 1.5, 1.6, 1.5]
    plateaus = lab.detect_plateaus(sizes, ns)
    assert len(plateaus) == 1 and plateaus[0].last_bytes == sizes[-1] and plateaus[0].ns == 1.5


def test_a_level_missing_from_the_curve_is_reported_as_such():
    sizes = lab.default_sizes(16 * MiB)                          # the sweep stops inside L3
    matches = lab.match_cache_levels(sizes, staircase(sizes), {**SYSFS, "L3": 1 << 30})
    l3 = next(m for m in matches if m.level == "L3")
    dram = matches[-1]
    assert l3.plateau is not None and l3.capacity_bytes == 16 * MiB and not l3.agrees
    assert dram.plateau is None and not dram.agrees


def test_a_capacity_far_from_sysfs_does_not_agree():
    sizes = lab.default_sizes(512 * MiB)
    matches = lab.match_cache_levels(sizes, staircase(sizes), {**SYSFS, "L2": 16 * MiB})
    l2 = next(m for m in matches if m.level == "L2")
    assert l2.ratio == pytest.approx(2 * MiB / (16 * MiB)) and not l2.agrees


def test_steps_beyond_dram_are_not_levels():
    sizes = lab.default_sizes(2048 * MiB)
    ns = [90.0 * 1.6 if s > 768 * MiB else v for s, v in zip(sizes, staircase(sizes))]   # a TLB-reach step
    matches = lab.match_cache_levels(sizes, ns, SYSFS)
    assert len(lab.detect_plateaus(sizes, ns)) == 5 and len(matches) == 4
    assert matches[-1].plateau.ns == 90.0 and matches[-1].plateau.last_bytes == 768 * MiB


def test_plateau_input_checks():
    with pytest.raises(ValueError, match="same length"):
        lab.detect_plateaus([4096, 8192], [1.0])
    with pytest.raises(ValueError, match="rel_tol must be > 0"):
        lab.detect_plateaus([4096], [1.0], rel_tol=0)
    with pytest.raises(ValueError, match="factor must be >= 1"):
        lab.match_cache_levels([4096], [1.0], SYSFS, factor=0.5)


# ---- STREAM -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kernel", range(4))
@pytest.mark.parametrize("threads", [1, 3])
def test_each_stream_kernel_matches_numpy(kernel, threads):
    """One pass of each kernel over an odd length, split over threads at line-rounded seams."""
    rng = np.random.default_rng(kernel)
    n = 10_007
    a, b, c = (rng.standard_normal(n) for _ in range(3))
    q = 3.0
    expected = {0: ("c", a.copy()), 1: ("b", q * c), 2: ("c", a + b), 3: ("a", b + q * c)}[kernel]
    ffi, lib = lab._native()
    elapsed = ffi.new("uint64_t *")
    ptr = {k: ffi.from_buffer("double[]", v) for k, v in zip("abc", (a, b, c))}
    assert lib.sy_lab_stream(kernel, ptr["a"], ptr["b"], ptr["c"], n, q, threads, ffi.NULL, elapsed) == 0
    np.testing.assert_array_equal({"a": a, "b": b, "c": c}[expected[0]], expected[1])


@pytest.mark.parametrize("threads", [1, 2])
def test_stream_validates(threads):
    r = lab.bandwidth(1 * MiB, threads=threads, repeat=3)
    assert r.threads == threads and r.array_bytes == 1 * MiB
    assert set(r.best_gbs) == set(lab.STREAM_KERNELS)
    assert all(r.best_gbs[k] >= r.median_gbs[k] > 0 for k in lab.STREAM_KERNELS)
    assert any("cache bandwidth" in note for note in r.notes)


def test_stream_numpy_validates():
    r = lab.bandwidth_numpy(1 * MiB, repeat=2)
    assert r.implementation == "NumPy" and all(v > 0 for v in r.best_gbs.values())


def test_stream_race_shares_the_arrays_and_validates():
    runs = lab.stream_race(1 * MiB, threads=(1, 2), repeat=2)
    assert [(r.implementation, r.threads) for r in runs] == [("C", 1), ("C", 2), ("NumPy", 1)]
    assert all(v > 0 for r in runs for v in r.best_gbs.values())


def test_stream_check_catches_a_wrong_element():
    a, b, c = (np.full(1000, v) for v in lab._expected_stream(3))
    lab.check_stream(a, b, c, 3)
    b[500] *= 1.001
    with pytest.raises(RuntimeError, match="array b is off"):
        lab.check_stream(a, b, c, 3)


def test_default_array_bytes_follows_stream_rule():
    size, notes = lab.default_array_bytes()
    llc = max(lab.sysfs_cache_sizes().values())
    assert size % 8 == 0
    assert size == 4 * llc or any("capped" in n for n in notes)


@pytest.mark.parametrize("call, message", [
    (lambda: lab.bandwidth(1024), r"array_bytes must be in \[65536,"),
    (lambda: lab.bandwidth(1 * MiB, threads=0), r"threads must be in \[1, 256\]; got 0"),
    (lambda: lab.bandwidth(1 * MiB, repeat=0), r"repeat must be in \[1, 100\]"),
    (lambda: lab.bandwidth(1 * MiB, repeat=101), r"repeat must be in \[1, 100\]"),
    (lambda: lab.bandwidth_numpy(1024), r"array_bytes must be in \[65536,"),
    (lambda: lab.stream_race(1 * MiB, threads=(1, 2, 3), repeat=60), r"rounds x implementations <= 200"),
    (lambda: lab.stream_race(1 * MiB, threads=(), numpy=False), "at least one implementation"),
])
def test_stream_rejects(no_c, call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- strides ------------------------------------------------------------------------------------
@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 5000), stride=st.integers(1, 5000))
def test_touch_stride_touches_exactly_the_multiples(n, stride):
    stride = min(stride, n)
    array = np.zeros(n, dtype=np.uint32)
    lab.touch_stride(array, stride)
    expected = np.zeros(n, dtype=np.uint32)
    expected[::stride] = 1
    np.testing.assert_array_equal(array, expected)


def test_strides_curve():
    curve = lab.strides((1, 16, 64), array_bytes=256 * KiB, repeat=2)
    assert curve.touched == [65536, 4096, 1024]
    assert len(curve.seconds) == 3 and all(ns > 0 for ns in curve.ns_per_touch)


@pytest.mark.parametrize("call, error, message", [
    (lambda: lab.touch_stride(np.zeros(16, np.uint32), 0), ValueError, r"stride must be in \[1, 16\]; got 0"),
    (lambda: lab.touch_stride(np.zeros(16, np.uint32), 17), ValueError, r"stride must be in \[1, 16\]; got 17"),
    (lambda: lab.touch_stride(np.zeros(16, np.int64), 1), TypeError, "uint32"),
    (lambda: lab.touch_stride(np.zeros(32, np.uint32)[::2], 1), TypeError, "C-contiguous"),
    (lambda: lab.strides((1, 0)), ValueError, r"strides\[i\] must be in \[1,"),
    (lambda: lab.strides((1,), array_bytes=100), ValueError, r"array_bytes must be in \[4096,"),
])
def test_strides_reject(no_c, call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---- cachegrind: simulated misses are deterministic, so the line effect can be asserted ------------
@pytest.mark.valgrind
def test_misses_are_per_line_not_per_element():
    import shutil

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind not installed")
    n_lines = 256 * KiB // 64
    reports = dict(lab.strides_cachegrind((1, 16, 64), array_bytes=256 * KiB))
    # stride 1 and 16 touch every line once: ~one D1 miss per line (a few for the glue), not per element
    for stride in (1, 16):
        assert n_lines <= reports[stride].d1_misses <= n_lines * 1.02
    assert reports[1].d_refs > 15 * reports[16].d_refs                         # 16x the work ...
    assert reports[64].d1_misses <= n_lines // 4 * 1.05                        # ... one line in 4


def test_demo_runs_at_tiny_sizes(tmp_path, capsys):
    from sympathy.demos import lab as demo

    demo.main(["--max-size", "64KiB", "--array-size", "1MiB", "--stride-array-size", "64KiB",
               "--iterations", "20000", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    for heading in ("1. False sharing", "2. The counter loop", "3. Visibility", "4. Latency", "5. Bandwidth",
                    "6. Cache lines"):
        assert heading in out
    assert "acquire: saw the store" in out
    assert (tmp_path / "lab-latency.png").stat().st_size > 0


def test_measurements_pin_the_caller_and_restore_its_affinity(monkeypatch):
    seen = []
    real = lab._pinned_caller

    def spy(pin, cpu=None):
        seen.append((pin, cpu))
        return real(pin, cpu)

    monkeypatch.setattr(lab._common, "_pinned_caller", spy)
    before = os.sched_getaffinity(0)
    lab.counter("register", 1000)
    lab.strides((1, 2), array_bytes=8 * KiB, repeat=1)
    lab.latency_curve([4 * KiB], loads=100, repeat=1)
    lab.counter("register", 1000, pin=False)
    assert [pin for pin, _ in seen] == [True, True, True, False]
    assert os.sched_getaffinity(0) == before


def test_tlb_steps_inside_a_level_do_not_shift_the_levels():
    """The newcomer's curve: 384-512 KiB and 768 KiB steps inside L2 (4 KiB pages outgrowing the TLB)
    were read as L3 and as "DRAM at 13 ns" while the table showed 170 ns from 8 MiB on."""
    sizes = lab.default_sizes(64 * MiB)
    levels = [(48 * KiB, 1.7), (256 * KiB, 5.4), (512 * KiB, 8.0), (1536 * KiB, 13.0), (6 * MiB, 40.0), (64 * MiB, 170.0)]
    ns = [next(latency for top, latency in levels if s <= top) for s in sizes]
    l1, l2, l3, dram = lab.match_cache_levels(sizes, ns, {"L1": 48 * KiB, "L2": 2 * MiB, "L3": 32 * MiB})
    assert (l1.plateau.ns, l2.plateau.ns, l3.plateau.ns, dram.plateau.ns) == (1.7, 5.4, 40.0, 170.0)
    assert l2.plateau.last_bytes == 1536 * KiB and l2.agrees
    assert dram.plateau.first_bytes == 8 * MiB
