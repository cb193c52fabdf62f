"""The CUDA sources keep compiling, and the loader's build cache works. Needs nvcc, not a GPU.

CI has nvcc and no GPU: every .cu compiles for sm_80 (A100) and sm_90a (H100) here, so a broken
kernel never lands. Skipped only where nvcc is absent.
"""
import os
import shutil

import pytest

from sympathy._errors import NotSupportedError
from sympathy.attention import cuda, cuda_build


def _has_nvcc() -> bool:
    try:
        cuda.find_nvcc()
    except NotSupportedError:
        return False
    return True


needs_nvcc = pytest.mark.skipif(not _has_nvcc(), reason="needs nvcc (CUDA toolkit)")


@needs_nvcc
def test_every_cu_compiles_for_sm80_and_sm90a(tmp_path):
    objects = cuda.compile_objects(["sm_80", "sm_90a"], tmp_path)
    expected = {f"{src.stem}.{arch}.o" for src in cuda.sources() for arch in ("sm_80", "sm_90a")}
    assert {o.name for o in objects} == expected
    assert {src.stem for src in cuda.sources()} >= {"attention_naive", "attention_tiled", "attention_mma"}
    assert all(o.stat().st_size > 0 for o in objects)


@pytest.fixture
def tiny_sources(tmp_path, monkeypatch):
    """A one-function source tree, so the cache logic is tested without compiling the kernels twice."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "attention_api.h").write_text("/* CDEF BEGIN */\nint sy_tiny(int x);\n/* CDEF END */\n")
    (src / "tiny.cu").write_text('extern "C" int sy_tiny(int x) { return x + 1; }\n')
    monkeypatch.setattr(cuda_build, "source_dir", lambda: src)   # where the loader looks it up (cuda re-exports it)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return src


@needs_nvcc
def test_build_caches_by_source_hash_and_rebuilds_on_change_or_force(tiny_sources, tmp_path):
    first = cuda.build("sm_80")
    assert first.parent == tmp_path / "cache" / "sympathy" / "cuda" and first.name.startswith("attention_sm_80_")
    stamp = first.stat().st_mtime_ns
    assert cuda.build("sm_80") == first and first.stat().st_mtime_ns == stamp     # cache hit: no compile
    assert cuda.build("sm_80", force=True) == first and first.stat().st_mtime_ns != stamp
    (tiny_sources / "tiny.cu").write_text('extern "C" int sy_tiny(int x) { return x + 2; }\n')
    assert cuda.build("sm_80") != first                                          # new source, new key
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(cuda._cdef())
    assert ffi.dlopen(str(cuda.build("sm_80"))).sy_tiny(40) == 42


@needs_nvcc
def test_a_header_only_change_changes_the_cache_key(tiny_sources):
    """A .cuh is compiled into every .cu that includes it: editing one alone must rebuild the library."""
    (tiny_sources / "tiny.cuh").write_text("#pragma once\n")
    nvcc = cuda.find_nvcc()
    key = cuda._source_key("sm_80", nvcc)
    assert cuda._source_key("sm_80", nvcc) == key
    (tiny_sources / "tiny.cuh").write_text("#pragma once\nconstexpr int kTiny = 1;\n")
    assert cuda._source_key("sm_80", nvcc) != key


@needs_nvcc
def test_a_compile_error_raises_with_nvccs_message(tiny_sources, tmp_path):
    (tiny_sources / "broken.cu").write_text("this is not C++\n")
    with pytest.raises(RuntimeError, match="nvcc failed on broken.cu for sm_80"):
        cuda.build("sm_80")


def test_the_cdef_block_parses_and_declares_every_kernel():
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(cuda._cdef())
    for kernel in cuda.KERNELS:
        assert f"int sy_attn_{kernel}_fwd(const sy_attn_params *params, void *stream);" in cuda._cdef()
    assert ffi.sizeof("sy_attn_params") > 0


def test_sources_are_found_in_a_checkout_or_installed():
    assert (cuda.source_dir() / "attention_api.h").is_file()
    assert cuda.sources()


def test_missing_nvcc_is_one_clear_error(monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(NotSupportedError, match="nvcc not found"):
        cuda.build_all(["sm_80"])


def test_bad_arch_names_are_refused():
    with pytest.raises(ValueError, match="sm_80"):
        cuda._check_arch("80")


def test_build_cuda_command_without_nvcc_prints_one_line_and_fails(monkeypatch, capsys):
    from sympathy.cli import main

    def no_nvcc():
        raise NotSupportedError("nvcc not found (CUDA toolkit)")

    monkeypatch.setattr(cuda_build, "find_nvcc", no_nvcc)
    assert main(["build-cuda", "--arch", "sm_80"]) == 1
    out = capsys.readouterr().out
    assert "nvcc not found" in out and "Traceback" not in out


def test_generated_wgmma_header_matches_its_generator():
    """cuda_src/hopper_wgmma.cuh is written by cuda_src/gen_hopper_wgmma.py: an edit to one without
    re-running the other would ship wrappers that disagree with their documented source."""
    import subprocess
    import sys

    generator = cuda.source_dir() / "gen_hopper_wgmma.py"
    fresh = subprocess.run([sys.executable, str(generator)], capture_output=True, text=True, check=True).stdout
    assert fresh == (cuda.source_dir() / "hopper_wgmma.cuh").read_text()
