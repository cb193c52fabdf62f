"""Memory barriers ("volatile"): a locked read-modify-write or a StoreLoad fence drains the store buffer.

The article's counter loop. A register add is one cycle; volatile is a load and a store through
memory; a lock-prefixed RMW or a StoreLoad fence drains the store buffer (~20 cycles); a
store-release is a plain store on x86 (TSO). Knob: `kind`. The visibility experiment shows the other
half: a plain load the compiler hoists out of a spin loop never sees another thread's store
(`spin_loop_disassembly` shows the `jmp` to itself), an acquire load does.
"""
from __future__ import annotations

import select
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Literal, get_args

from .._errors import SY_ETIMEDOUT, NotSupportedError
from . import _common
from ._common import _check, _int_in

CounterKind = Literal["register", "volatile", "atomic_relaxed", "atomic_seq_cst", "store_release", "store_seq_cst"]
COUNTER_KINDS: tuple[CounterKind, ...] = get_args(CounterKind)
_COUNTER_ALIASES = {"atomic": "atomic_seq_cst"}   # DESIGN.md's short name: C11's default order


@dataclass(frozen=True)
class CounterResult:
    kind: str
    iterations: int
    final_value: int          # == iterations, exactly
    seconds: float

    @property
    def ns_per_increment(self) -> float:
        return self.seconds * 1e9 / self.iterations


def counter(kind: CounterKind = "register", iterations: int = 50_000_000, *, pin: bool = True) -> CounterResult:
    """Increment one counter `iterations` times the way `kind` says (see COUNTER_KINDS), on the
    calling thread (pinned to one CPU for the call unless pin=False)."""
    name = _COUNTER_ALIASES.get(kind, kind)
    if name not in COUNTER_KINDS:
        raise ValueError(f"kind must be one of {COUNTER_KINDS} (or 'atomic'); got {kind!r}")
    iterations = _int_in("iterations", iterations, 1, 10**11)
    ffi, lib = _common._native()
    final, elapsed = ffi.new("uint64_t *"), ffi.new("uint64_t *")
    with _common._pinned_caller(pin):
        status = lib.sy_lab_counter(COUNTER_KINDS.index(name), iterations, final, elapsed)
    _check(status, f"counter({name!r})")
    return CounterResult(name, iterations, final[0], elapsed[0] * 1e-9)


# ---- visibility: the hoisted load ---------------------------------------------------------------
Reader = Literal["plain", "acquire"]
READERS: tuple[Reader, ...] = get_args(Reader)


@dataclass(frozen=True)
class VisibilityResult:
    reader: str
    saw_store: bool
    timed_out: bool                   # the child was still spinning at the deadline and was killed
    store_to_seen_ns: int | None      # writer's store to reader's exit (None when it never exited)
    timeout: float

    def describe(self) -> str:
        if self.timed_out:
            return f"{self.reader}: still spinning {self.timeout:g} s after the store — killed"
        if not self.saw_store:
            return f"{self.reader}: left the loop {-self.store_to_seen_ns} ns before the store (loop deleted)"
        return f"{self.reader}: saw the store after {self.store_to_seen_ns / 1e3:.1f} µs"


_VISIBILITY_CHILD = """\
import importlib.util, sys
spec = importlib.util.spec_from_file_location("sympathy._lab", sys.argv[1])
lab = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lab)
out = lab.ffi.new("int64_t *")
print("spinning", flush=True)
status = lab.lib.sy_lab_visibility(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), out)
print(status, out[0], flush=True)
"""


def visibility(reader: Reader = "acquire", *, timeout: float = 1.0, delay: float = 0.05) -> VisibilityResult:
    """Does a reader spinning on a flag see another thread's store to it?

    A writer thread sleeps `delay` seconds and sets the flag; the reader spins. The "plain" reader
    loads a plain int, so the compiler may load it once and spin forever on the register (C calls
    that a data race: undefined behaviour). It therefore runs in a child process that is killed
    `timeout` seconds after the store. The "acquire" reader uses an atomic acquire load and sees it.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {READERS}; got {reader!r}")
    if not 0 < timeout <= 60:
        raise ValueError(f"timeout must be in (0, 60] seconds; got {timeout}")
    if not 0 <= delay <= 10:
        raise ValueError(f"delay must be in [0, 10] seconds; got {delay}")
    _common._native()                 # the clear "not built" error, before a child is started
    from .. import _lab

    args = [sys.executable, "-c", _VISIBILITY_CHILD, _lab.__file__, str(READERS.index(reader)),
            str(int(delay * 1e9)), str(int(timeout * 1e9))]
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as child:
        try:
            _read_line(child, deadline=time.monotonic() + 30, expect="spinning")
            child.wait(timeout=delay + timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            return VisibilityResult(reader, saw_store=False, timed_out=True, store_to_seen_ns=None, timeout=timeout)
        status_text, seen_text = (child.stdout.read().split() + ["", ""])[:2]
        if child.returncode != 0 or not status_text:
            raise RuntimeError(f"visibility child failed (exit {child.returncode}): {child.stderr.read().strip()}")
    status, seen = int(status_text), int(seen_text)
    if status == SY_ETIMEDOUT:   # the acquire reader's own deadline (only if the writer never ran)
        return VisibilityResult(reader, saw_store=False, timed_out=True, store_to_seen_ns=None, timeout=timeout)
    _check(status, f"visibility(reader={reader!r})")
    return VisibilityResult(reader, saw_store=seen >= 0, timed_out=False, store_to_seen_ns=seen, timeout=timeout)


def _read_line(child: subprocess.Popen, deadline: float, expect: str) -> None:
    """Wait for the child's `expect` line (it has loaded the kernels and is about to spin)."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            child.kill()
            raise RuntimeError("visibility child did not start within 30 s")
        ready, _, _ = select.select([child.stdout], [], [], left)
        if ready:
            line = child.stdout.readline()
            if line.strip() == expect:
                return
            if not line:
                raise RuntimeError(f"visibility child exited early: {child.stderr.read().strip()}")


@dataclass(frozen=True)
class Disassembly:
    function: str
    text: str                 # objdump's listing of the function
    spins_in_place: bool      # a jmp whose target is itself: the load was hoisted out of the loop


def spin_loop_disassembly(reader: Reader = "plain") -> Disassembly:
    """The machine code of the reader's spin loop, as it was compiled into sympathy._lab (objdump).

    No compiler is needed at run time: this disassembles the very function that `visibility` ran.
    """
    if reader not in READERS:
        raise ValueError(f"reader must be one of {READERS}; got {reader!r}")
    objdump = shutil.which("objdump")
    if objdump is None:
        raise NotSupportedError("showing the spin loop needs objdump (binutils) on PATH")
    _common._native()
    from .. import _lab

    function = f"sy_lab_spin_{reader}"
    proc = subprocess.run([objdump, "-d", "--no-show-raw-insn", f"--disassemble={function}", _lab.__file__],
                          capture_output=True, text=True, timeout=60)
    body = proc.stdout.split(f"<{function}>:", 1)
    if proc.returncode != 0 or len(body) < 2:
        raise NotSupportedError(f"objdump could not disassemble {function} (binutils >= 2.32 needed for "
                                f"--disassemble=SYMBOL): {proc.stderr.strip()[:200]}")
    lines = []
    for line in body[1].splitlines()[1:]:
        if not line.strip():
            break
        lines.append(line.rstrip())
    return Disassembly(function, "\n".join(lines), any(_jumps_to_itself(line) for line in lines))


def _jumps_to_itself(line: str) -> bool:
    """`  2c16:\tjmp    2c16 <...>`: an unconditional jump to its own address."""
    address, _, rest = line.strip().partition(":")
    parts = rest.split()
    return len(parts) >= 2 and parts[0] == "jmp" and parts[1] == address.strip()
