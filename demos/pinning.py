"""Seed 000's "Avoiding context switching": the ring pinned, unpinned, and sharing its core with a busy process.

The article's LMAX set-up isolates cores (`isolcpus=`), partitions them (`cset set/proc`), starts
the JVM inside a set (`taskset -cp`) and pins each thread (`sched_set_affinity`). Here:
  1. One C ring, one producer and one consumer thread (c_src/ring_bench.c, busy-spin waits), run
     three ways: each thread pinned to its own CPU; unpinned; pinned with a busy process started on
     the consumer's CPU (through `taskset -c` where present). Per run: items/s and the voluntary and
     involuntary context switches of the whole process (getrusage, which counts threads that have
     exited; /proc/PID/status shows only the live main thread's).
  2. What isolcpus=, taskset -c and cset shield do, with the commands for this machine, and which
     of them need root or a reboot.
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import time

BUSY_LOOP = "import time\nend = time.monotonic() + 600\nwhile time.monotonic() < end: pass\n"


def context_switches() -> tuple[int, int]:
    """(voluntary, involuntary) context switches of this process so far, its exited threads included."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw, usage.ru_nivcsw


def measure(items: int, pin: bool) -> dict[str, float]:
    """One unicast ring run; items/s and the context switches it caused."""
    from sympathy.bench.suites.ring import SHAPES, c_ring

    vol0, invol0 = context_switches()
    t0 = time.perf_counter()
    result = c_ring(SHAPES["unicast 1P-1C"], "busy_spin", items, 1, capacity=1024, pin=pin)
    seconds = time.perf_counter() - t0
    vol1, invol1 = context_switches()
    return {"items/s": result["items/s"], "seconds": seconds, "voluntary": vol1 - vol0, "involuntary": invol1 - invol0}


def start_busy_process(cpu: int) -> subprocess.Popen:
    """A CPU-bound process on `cpu`: through `taskset -c` when installed (the article's tool), else
    os.sched_setaffinity in the child. It ends by itself after 10 minutes if we are killed."""
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", str(cpu), sys.executable, "-c", BUSY_LOOP]
    else:
        cmd = [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\n{BUSY_LOOP}"]
    proc = subprocess.Popen(cmd)
    time.sleep(0.3)   # let it start spinning
    return proc


def commands_for_this_machine(cpus: list[int]) -> list[tuple[str, str, str, str]]:
    """(tool, what it does, command here, needs) rows for the reader's own machine."""
    app = cpus[len(cpus) // 2:] or cpus
    spec = ",".join(map(str, app))
    system = ",".join(map(str, [c for c in cpus if c not in app])) or "0"
    return [
        ("isolcpus=", "kernel boot option: the scheduler never places a task on these CPUs unless it is "
         "pinned there (with nohz_full= the timer tick stops too)",
         f'GRUB_CMDLINE_LINUX="... isolcpus={spec} nohz_full={spec} rcu_nocbs={spec}" in /etc/default/grub; '
         "sudo update-grub; sudo reboot", "root and a reboot"),
        ("taskset -c", "start a program (or re-pin a running one, -p) with a CPU affinity mask",
         f"taskset -c {spec} python app.py    |    taskset -cp {spec} PID", "nothing for your own processes; "
         "root for others'"),
        ("cset shield", "cpuset cgroups at run time: move every task (and, with -k, kernel threads) off the "
         "shielded CPUs, then run the app inside",
         f"sudo cset shield --cpu {spec} -k on; sudo cset shield --exec -- python app.py; sudo cset shield --reset",
         "root (cgroup v1 cpusets; on cgroup v2 use systemd: sudo systemctl set-property --runtime "
         f"system.slice AllowedCPUs={system})"),
        ("sy.pin / sy.pinned", "pin the calling Python thread (sched_setaffinity); the ring's C bench threads "
         "pin themselves", f"with sy.pinned({app[-1]}): consumer_loop()", "nothing"),
    ]


def main(argv: list[str] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table
    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="sympathy demo pinning", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=2_000_000, help="items per run, one at a time (default 2000000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per case (default 3; the median is shown)")
    args = parser.parse_args(argv)
    if args.items < 1 or args.repeat < 1:
        parser.error("--items and --repeat must be >= 1")
    console = Console()
    cpus = sorted(os.sched_getaffinity(0))
    console.print(f"load average {os.getloadavg()[0]:.2f} on {len(cpus)} usable CPUs before the runs")

    console.rule("1. The ring (C, 1P-1C, busy-spin, one item at a time): pinned, unpinned, sharing a core")
    if len(cpus) < 2:
        console.print("one usable CPU: a spinning pair cannot run side by side; skipped")
    else:
        cases: dict[str, list[dict]] = {"pinned, one CPU each": [], "unpinned": [],
                                        f"pinned, busy process on CPU {cpus[1]}": []}
        for _ in tqdm(range(args.repeat), desc="runs", leave=False):
            cases["pinned, one CPU each"].append(measure(args.items, pin=True))
            cases["unpinned"].append(measure(args.items, pin=False))
            hog = start_busy_process(cpus[1])
            try:
                cases[f"pinned, busy process on CPU {cpus[1]}"].append(measure(args.items, pin=True))
            finally:
                hog.terminate()
                hog.wait()
        t = Table(title=f"{args.items:,} items per run, median of {args.repeat}; context switches of the whole "
                        "process per run (getrusage)", title_justify="left")
        for heading in ("case", "items/s", "× pinned", "voluntary", "involuntary"):
            t.add_column(heading, justify="right")
        median = {name: sorted(runs, key=lambda r: r["items/s"])[len(runs) // 2] for name, runs in cases.items()}
        base = median["pinned, one CPU each"]["items/s"]
        for name, r in median.items():
            t.add_row(name, f"{r['items/s'] / 1e6:.2f} M", f"{r['items/s'] / base:.2f}×", f"{r['voluntary']:,}",
                      f"{r['involuntary']:,}")
        console.print(t)
        console.print("Involuntary switches are the scheduler taking the CPU away (a time slice ended, a "
                      "busy process wanted it); voluntary ones are a thread going to sleep (a blocking wait, "
                      "I/O). A spinning consumer that shares its core with a busy process runs only in its "
                      "time slices: each item waits for the next one. This machine is a shared VM, so "
                      "even the pinned row has neighbours the hypervisor schedules beside it.")

    console.rule("2. Keeping other work off the ring's cores, on this machine")
    isolated = open("/sys/devices/system/cpu/isolated").read().strip() if os.path.exists(
        "/sys/devices/system/cpu/isolated") else "unknown"
    console.print(f"CPUs usable here: {cpus}; isolated at boot (/sys/devices/system/cpu/isolated): "
                  f"{isolated or 'none'}; taskset: {shutil.which('taskset') or 'not installed'}; "
                  f"cset: {shutil.which('cset') or 'not installed (pip install cpuset-py3, or apt-get install cpuset)'}; "
                  f"running as root: {os.geteuid() == 0}")
    if shutil.which("taskset"):
        shown = subprocess.run(["taskset", "-cp", str(os.getpid())], capture_output=True, text=True)
        console.print(f"$ taskset -cp {os.getpid()}   (this process)\n{shown.stdout.strip() or shown.stderr.strip()}")
    t = Table(title_justify="left", show_lines=True)
    for heading in ("tool", "what it does", "the command here", "needs"):
        t.add_column(heading)
    for row in commands_for_this_machine(cpus):
        t.add_row(*row)
    console.print(t)


if __name__ == "__main__":
    main()
