"""The shared segment under a full /dev/shm, foreign and scribbled segments, stale segments, item
types and limits (issue 15, cases 1, 2, 9, 10, 11).

Scenarios that exit, crash or may misbehave run in a child process with a timeout; the test asserts
its exit status and what it printed.
"""
import errno
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

import sympathy as sy
from sympathy._ring import ffi, lib

ROOT = Path(__file__).resolve().parents[1]
CHILD_TIMEOUT = 60
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making a segment of another uid needs root")


def unique_name() -> str:
    return f"sytest-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def shm(name: str) -> str:
    return f"/dev/shm/{name}"


def run_child(code: str) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter importing this checkout's sympathy."""
    prelude = "import os, sys, signal\nimport numpy as np\nimport sympathy as sy\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT,
                          capture_output=True, text=True, timeout=CHILD_TIMEOUT)


def in_forked_child(body) -> int:
    """Run body() in a fork()ed child; its exit status (0: body returned)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            body()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + CHILD_TIMEOUT
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("forked child timed out")


def layout(rb) -> dict:
    out = ffi.new("int64_t[]", 32)
    lib.sy_ring_layout_offsets(rb._handle, out, 32)
    return {"cursor": out[0], "consumer0": out[2], "registry": out[5], "producer_records": out[7]}


def poke(name: str, offset: int, data: bytes) -> None:
    with open(shm(name), "r+b") as f:
        f.seek(offset)
        f.write(data)


# ---- case 1: a full /dev/shm is an OSError at creation, never a SIGBUS later ------------------------
def test_a_ring_larger_than_dev_shm_fails_at_creation_with_the_sizes():
    fs = os.statvfs("/dev/shm")
    total = fs.f_blocks * fs.f_frsize
    # more than the whole filesystem holds, so more than is free: refused before a page is touched
    capacity = 1 << max(1, (total // 16).bit_length())
    name = unique_name()
    with pytest.raises(OSError) as info:
        sy.RingBuffer(capacity, np.int64, name=name)
    assert info.value.errno == errno.ENOSPC
    message = str(info.value)
    need = lib.sy_ring_region_bytes(capacity, 8)
    assert need > total and f"{need} bytes" in message and "free" in message and name in message
    assert not os.path.exists(shm(name))  # nothing left behind


def _can_mount_a_private_dev_shm() -> bool:
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True,
                              timeout=CHILD_TIMEOUT).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_with_private_dev_shm(size: str, script: str) -> subprocess.CompletedProcess:
    """Run a Python script with a fresh tmpfs of this size on /dev/shm, in a mount namespace of its own."""
    return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           f"mount -t tmpfs -o size={size} tmpfs /dev/shm && exec {sys.executable} -c '{script}'"],
                          cwd=ROOT, capture_output=True, text=True, timeout=CHILD_TIMEOUT)


needs_private_dev_shm = pytest.mark.skipif(not _can_mount_a_private_dev_shm(),
                                           reason="needs unshare --mount (root) to mount a /dev/shm of its own")


@needs_private_dev_shm
def test_a_dev_shm_without_a_size_limit_reports_no_free_space_and_still_works():
    done = run_with_private_dev_shm("0", textwrap.dedent("""
        import os
        import numpy as np
        import sympathy as sy
        fs = os.statvfs("/dev/shm")
        with sy.RingBuffer(1 << 16, np.int64, name="sytest-unlimited") as rb:
            print(fs.f_blocks, fs.f_bavail, os.stat("/dev/shm/sytest-unlimited").st_blocks * 512 >= (1 << 20))
    """))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "0", "True"]  # statvfs says nothing; the ring is made and reserved


@needs_private_dev_shm
def test_on_a_64_mib_dev_shm_the_issues_ring_fails_at_creation_and_one_that_fits_never_sigbuses():
    """The issue's own scenario, on Docker's default 64 MiB /dev/shm, mounted in a private mount
    namespace (nobody else sees it): today's main creates the 64 MiB ring and dies of SIGBUS
    writing its slots."""
    script = textwrap.dedent("""
        import errno, os
        import numpy as np
        import sympathy as sy
        def fill(capacity):
            rb = sy.RingBuffer(capacity, np.int64, name=f"sytest-small-shm-{capacity}")
            c = rb.consumer()
            for start in range(0, capacity, 1 << 16):  # every slot written once
                rb.publish_batch(np.arange(start, start + (1 << 16), dtype=np.int64))
                assert c.get_batch(1 << 16, timeout=5)[-1] == start + (1 << 16) - 1
            return rb
        try:
            fill(1 << 22)  # 4 Mi int64 slots of 16 B: 64 MiB plus the header
            print("created and filled")
        except OSError as exc:
            print("refused", errno.errorcode[exc.errno], exc)
        kept = fill(1 << 20)  # 16 MiB: fits, and is reserved
        with open("/dev/shm/filler", "wb") as f:
            f.write(bytes(40 << 20))  # 40 + 16 of 64 MiB used: a 32 MiB ring no longer fits
        try:
            fill(1 << 21)
            print("created and filled")
        except OSError as exc:
            print("refused", errno.errorcode[exc.errno], exc)
        kept.close()
    """)
    done = run_with_private_dev_shm("64m", script)
    assert done.returncode == 0, f"status {done.returncode} (-7: SIGBUS): {done.stderr}"
    first, second = done.stdout.splitlines()
    assert first.startswith("refused ENOSPC") and "64.0 MiB" in first and "free of 64.0 MiB" in first
    assert second.startswith("refused ENOSPC") and "32.0 MiB" in second and "free of 64.0 MiB" in second


def test_creation_reserves_the_whole_segment():
    name = unique_name()
    with sy.RingBuffer(1 << 16, np.int64, name=name):
        st = os.stat(shm(name))
        assert st.st_blocks * 512 >= st.st_size >= (1 << 16) * 16  # every page allocated, not sparse


# ---- case 2: foreign segments -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o666, 0o660])
def test_attach_refuses_a_segment_open_to_group_or_others(mode):
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name):
        os.chmod(shm(name), mode)
        with pytest.raises(PermissionError, match=f"mode {mode:04o}.*refusing to attach"):
            sy.RingBuffer.attach(name)


def test_a_created_segment_is_0600_whatever_the_umask():
    name = unique_name()
    old = os.umask(0)  # umask 0: shm_open alone would still give 0600 here ...
    try:
        with sy.RingBuffer(16, np.int64, name=name):
            assert os.stat(shm(name)).st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
    old = os.umask(0o277)  # ... and with a umask that strips the owner's write bit, fchmod restores it
    try:
        with sy.RingBuffer(16, np.int64, name=name):
            assert os.stat(shm(name)).st_mode & 0o777 == 0o600
            assert sy.RingBuffer.attach(name).capacity == 16
    finally:
        os.umask(old)


@as_root
def test_attach_refuses_a_segment_another_user_created_even_chmod_666():
    name = unique_name()

    def create_as_nobody():
        os.setgid(NOBODY)
        os.setuid(NOBODY)
        rb = sy.RingBuffer(16, np.int64, name=name)
        rb.consumer()
        rb.publish(666)
        os.chmod(shm(name), 0o666)  # "anyone may use it": still not ours

    try:
        assert in_forked_child(create_as_nobody) == 0
        assert os.stat(shm(name)).st_uid == NOBODY
        with pytest.raises(PermissionError, match=f"owned by uid {NOBODY}.*euid 0"):
            sy.RingBuffer.attach(name)
    finally:
        sy.RingBuffer.cleanup(name)


@as_root
def test_attach_refuses_our_segment_given_to_another_user():
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name):
        os.chown(shm(name), NOBODY, NOBODY)
        with pytest.raises(PermissionError, match=f"owned by uid {NOBODY}"):
            sy.RingBuffer.attach(name)


@as_root
def test_another_user_cannot_shrink_our_segment_under_our_mapping():
    """Truncating a mapped segment kills its users with SIGBUS. Another user's segments are refused
    (above), and ours are 0600: another user cannot open them to truncate them."""
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name) as rb:
        c = rb.consumer()

        def truncate_as_nobody():
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                os.truncate(shm(name), 0)
            except PermissionError:
                return
            raise AssertionError("another user truncated our segment")

        assert in_forked_child(truncate_as_nobody) == 0
        rb.publish(5)
        assert c.get(timeout=5) == 5 and os.stat(shm(name)).st_size > 0


@pytest.mark.parametrize("size_change", [+4096, -4096])
def test_attach_checks_the_file_size_against_the_header_before_mapping(size_change):
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name):
        size = os.stat(shm(name)).st_size
        os.truncate(shm(name), size + size_change)
        with pytest.raises(ValueError, match="not a valid sympathy ring"):
            sy.RingBuffer.attach(name)


@pytest.mark.parametrize("field", ["closed", "producers", "lock_pid", "consumer_sequence", "cursor", "item_type"])
def test_attach_validates_the_whole_header(field):
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name) as rb:
        where = layout(rb)
        registry = where["registry"]  # active(8) gating(8) lock_pid(4) closed(4) producers(4)
        damage = {"closed": (registry + 20, (7).to_bytes(4, "little")),
                  "producers": (registry + 24, (999).to_bytes(4, "little")),
                  "lock_pid": (registry + 16, (-3).to_bytes(4, "little", signed=True)),
                  "consumer_sequence": (where["consumer0"], (-5).to_bytes(8, "little", signed=True)),
                  "cursor": (where["cursor"], (-2).to_bytes(8, "little", signed=True)),
                  # the origin block follows the 64 producer records: nonce, pid, length, type
                  "item_type": (where["producer_records"] + 64 * 128 + 24, b"'<f8'")}[field]
        poke(name, *damage)
        with pytest.raises(ValueError, match="not a valid sympathy ring"):
            sy.RingBuffer.attach(name)


# ---- case 9: stale segments ---------------------------------------------------------------------------
# a fork()ed child that exits through sys.exit runs the exit handlers it inherited: they must leave
# the parent's segment alone (printed True), and the parent's own exit then removes it
FORKED_CHILD_EXITS = """pid = os.fork()
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
print(os.path.exists(path), flush=True)"""


@pytest.mark.parametrize("ending, status", [("pass", 0), ("raise RuntimeError('boom')", 1), ("sys.exit(3)", 3),
                                            (FORKED_CHILD_EXITS, 0)])
def test_the_creators_segment_is_removed_when_its_interpreter_exits(ending, status):
    name = unique_name()
    done = run_child(f"""
rb = sy.RingBuffer(16, np.int64, name={name!r})
c = rb.consumer()
rb.publish(1)
path = "/dev/shm/{name}"
print(os.path.exists(path), flush=True)
""" + ending)
    try:
        assert done.returncode == status, done.stderr
        assert set(done.stdout.split()) == {"True"}
        assert not os.path.exists(shm(name))
    finally:
        sy.RingBuffer.cleanup(name)


def test_create_reclaims_a_segment_whose_processes_all_died():
    name = unique_name()
    done = run_child(f"""
        rb = sy.RingBuffer(16, np.int64, name={name!r})
        other = sy.RingBuffer.attach({name!r})
        c = other.consumer()
        rb.publish(1)
        os.kill(os.getpid(), signal.SIGKILL)  # no exit handler runs
    """)
    try:
        assert done.returncode == -9, done.stderr
        assert os.path.exists(shm(name))
        survivor = sy.RingBuffer.attach(name)  # a live process maps it: not stale
        with pytest.raises(FileExistsError, match="live process maps it"):
            sy.RingBuffer(16, np.int64, name=name)
        survivor.close()
        with pytest.warns(RuntimeWarning, match=rf"removed the stale segment left by process \d+"):
            rb = sy.RingBuffer(32, np.int64, name=name)
        with rb:
            c = rb.consumer()
            rb.publish(2)
            assert c.get(timeout=5) == 2 and sy.RingBuffer.attach(name).capacity == 32
    finally:
        sy.RingBuffer.cleanup(name)


def test_attach_during_a_reclaim_finds_no_ring_rather_than_the_stale_one():
    import fcntl
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name) as rb:
        rb.close(unlink=False)  # nobody maps it: stale
        fd = os.open(shm(name), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what a reclaim holds while it removes it
            with pytest.raises(FileNotFoundError, match="no shared ring"):
                sy.RingBuffer.attach(name)
        finally:
            os.close(fd)
            sy.RingBuffer.cleanup(name)


def test_create_reclaims_an_unfinished_creation_but_never_a_file_that_is_not_a_ring():
    name = unique_name()
    try:
        fd = os.open(shm(name), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)  # a creator that died at once
        os.close(fd)
        os.utime(shm(name), (time.time() - 60, time.time() - 60))
        with pytest.warns(RuntimeWarning, match="died while creating it"):
            sy.RingBuffer(16, np.int64, name=name).close()
        Path(shm(name)).write_bytes(b"someone else's data")
        os.chmod(shm(name), 0o600)
        with pytest.raises(FileExistsError):
            sy.RingBuffer(16, np.int64, name=name)
        assert Path(shm(name)).read_bytes() == b"someone else's data"
    finally:
        sy.RingBuffer.cleanup(name)


def test_close_removes_only_its_own_segment_not_one_recreated_under_the_name():
    name = unique_name()
    old = sy.RingBuffer(16, np.int64, name=name)
    assert sy.RingBuffer.cleanup(name)
    with sy.RingBuffer(32, np.int64, name=name) as new:
        old.close()  # the creator of the first ring: the name is no longer its segment
        assert os.path.exists(shm(name))
        peer = sy.RingBuffer.attach(name)
        assert peer.capacity == 32
        peer.close(unlink=True)  # an explicit unlink removes the segment the peer mapped
        assert not os.path.exists(shm(name))


# ---- case 10: the item type lives in the segment -------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.int64, ">i4", np.float32, "S8", "M8[ns]",
                                   np.dtype([("a", "u1"), ("b", "<f8")], align=True),
                                   np.dtype({"names": ["x", "y"], "formats": ["<i4", "<i2"],
                                             "offsets": [0, 8], "itemsize": 16})])
def test_attach_without_a_dtype_recovers_the_creators(dtype):
    dtype = np.dtype(dtype)
    name = unique_name()
    with sy.RingBuffer(16, dtype, name=name) as rb:
        peer = sy.RingBuffer.attach(name)
        assert peer.dtype == dtype
        c = peer.consumer()
        items = np.frombuffer((np.arange(5 * dtype.itemsize) % 251).astype(np.uint8).tobytes(), dtype)
        rb.publish_batch(items)
        got = c.get_batch(5, timeout=5)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, items)
        peer.close()


def test_attach_recovers_a_subarray_dtype_and_raw_items():
    name = unique_name()
    with sy.RingBuffer(16, ("<f4", (3,)), name=name):
        assert sy.RingBuffer.attach(name).dtype == np.dtype(("<f4", (3,)))
    with sy.RingBuffer(16, item_size=12, name=name):
        peer = sy.RingBuffer.attach(name)
        assert peer.dtype is None and peer.item_size == 12


def test_attach_with_another_dtype_is_refused():
    name = unique_name()
    with sy.RingBuffer(16, np.int64, name=name):
        with pytest.raises(ValueError, match="holds dtype int64, not float64"):
            sy.RingBuffer.attach(name, np.float64)
        with pytest.raises(ValueError, match="holds dtype int64, 8-byte items"):
            sy.RingBuffer.attach(name, np.int32)
        assert sy.RingBuffer.attach(name, item_size=8).dtype is None  # raw bytes, asked for
    raw = unique_name()
    with sy.RingBuffer(16, item_size=8, name=raw):
        assert sy.RingBuffer.attach(raw).dtype is None
        with pytest.raises(ValueError, match=r"holds raw items \(item_size=8\), not int64"):
            sy.RingBuffer.attach(raw, np.int64)


def test_publish_refuses_items_of_another_kind():
    with sy.RingBuffer(8, item_size=4) as rb:
        with pytest.raises(TypeError, match="raw ring"):
            rb.publish(3)  # bytes(3) would be three zero bytes
        rb.publish(b"abcd")
        rb.publish(np.frombuffer(b"wxyz", np.uint8))
        assert rb.cursor == 1
    with sy.RingBuffer(8, np.int64) as rb:
        for item in (b"12345678", bytearray(b"12345678"), "12", memoryview(b"12345678")):
            with pytest.raises(TypeError, match="holds int64 items"):
                rb.publish(item)
        assert rb.cursor == -1
    with sy.RingBuffer(8, "S4") as rb:
        rb.publish(b"ab")  # bytes are the items of a bytes dtype
        assert rb.cursor == 0


def test_a_dtype_too_long_to_store_names_the_limit():
    dtype = np.dtype([(f"field_with_a_long_name_{i}", "<i4") for i in range(100)])
    with pytest.raises(ValueError, match=rf"at most {lib.SY_RING_ITEM_TYPE_MAX - 1}"):
        sy.RingBuffer(8, dtype, name=unique_name())


# ---- case 11: messages -----------------------------------------------------------------------------------
def test_a_too_long_name_is_refused_in_python_naming_the_limit():
    with pytest.raises(ValueError, match=r"name is 200 characters; a ring name is at most 199"):
        sy.RingBuffer(8, np.int64, name="a" * 200)
    name = f"{unique_name()}-".ljust(199, "x")
    with sy.RingBuffer(8, np.int64, name=name):
        assert sy.RingBuffer.attach(name).capacity == 8


@pytest.mark.parametrize("read", ["get", "get_batch", "view_batch", "poll"])
def test_a_corrupted_cursor_is_a_clear_error(read):
    name = unique_name()
    cursor_offset = None
    with sy.RingBuffer(16, np.int64, name=name) as rb:
        cursor_offset = layout(rb)["cursor"]
    done = run_child(f"""
        rb = sy.RingBuffer(16, np.int64, name={name!r})
        reader = rb.poller() if {read!r} == "poll" else rb.consumer()
        rb.publish_batch(np.arange(10, dtype=np.int64))
        with open("/dev/shm/{name}", "r+b") as f:  # something scribbles on the cursor
            f.seek({cursor_offset})
            f.write((2**63 - 1).to_bytes(8, "little"))
        try:
            if {read!r} == "get":
                reader.get(timeout=5)
            elif {read!r} == "get_batch":
                reader.get_batch(64, timeout=5)
            elif {read!r} == "view_batch":
                with reader.view_batch(64, timeout=5):
                    pass
            else:
                reader.poll(lambda *event: True)
        except RuntimeError as exc:
            print("RuntimeError:", exc)
    """)
    assert done.returncode == 0, done.stderr
    assert "RuntimeError:" in done.stdout and "shared memory is corrupt" in done.stdout
