"""The cache-line lab: each hardware effect as a small C kernel you can run and measure.

    import sympathy as sy
    sy.lab.false_sharing(threads=2, padded=False)   # counters in one line vs one per line pair (sharing.py)
    sy.lab.counter(kind="atomic_seq_cst")           # what each kind of "volatile" costs (barriers.py)
    sy.lab.visibility(reader="plain")               # the hoisted load that never sees the store (barriers.py)
    sy.lab.latency_curve()                          # ns per dependent load vs working-set size (latency.py)
    sy.lab.bandwidth()                              # STREAM copy/scale/add/triad, GB/s (stream.py)
    sy.lab.strides()                                # every element vs every 16th (cache_lines.py)

Kernels live in c_src/lab.c and time themselves (no Python inside a measurement). Arguments are
checked in Python, before any C runs; messages name the argument and the bound. Each module is one
effect: its mechanism, its knob, and the functions that measure it (docs/lab.md has the figures);
_common.py holds the line sizes, the kernels' loader, the argument checks and pinning they share.
"""
from ._common import (DESTRUCTIVE, LINE, MAX_THREADS, GiB, KiB, MiB, _native, _pinned_caller, human_size,
                      parse_size, sysfs_cache_sizes)
from .sharing import INCREMENTS, FalseSharingResult, Increment, false_sharing, false_sharing_sweep
from .barriers import (COUNTER_KINDS, READERS, CounterKind, CounterResult, Disassembly, Reader, VisibilityResult,
                       _jumps_to_itself, counter, spin_loop_disassembly, visibility)
from .latency import (HUGE_PAGE, MAX_WORKING_SET, MIN_LEVEL_STEP, MIN_WORKING_SET, PATTERNS, Chase, LatencyCurve,
                      LevelMatch, Pattern, Plateau, build_chase, chase, chase_cycle_length, default_sizes,
                      detect_plateaus, latency_curve, match_cache_levels)
from .stream import (STREAM_BYTES_PER_ELEMENT, STREAM_KERNELS, STREAM_MAX_PASSES, STREAM_MAX_REPEAT, STREAM_SCALAR,
                     StreamKernel, StreamResult, _expected_stream, bandwidth, bandwidth_numpy, check_stream,
                     default_array_bytes, stream_race)
from .cache_lines import (StrideCurve, cachegrind_arguments, cachegrind_cases, cachegrind_help, strides,
                          strides_cachegrind, touch_stride)
