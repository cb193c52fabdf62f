"""Installing and importing: an unbuilt checkout takes the installed copy's modules (or says what
to run), the build stops when cffi is missing, the CUDA prebuild's decisions, the nvcc notice, and
`import sympathy.matmul as m` giving the module."""
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sympathy
from sympathy.config import package_parent
from test_cuda_build import tiny_sources  # noqa: F401  (a one-function CUDA source tree)

PACKAGE = Path(sympathy.__path__[0])      # the built package under test (installed, or built in place)
CHECKOUT = Path(__file__).resolve().parents[1]


@pytest.fixture
def unbuilt_checkout(tmp_path):
    """A copy of the package's Python sources without its C modules, laid out like a checkout."""
    root = tmp_path / "checkout"
    shutil.copytree(PACKAGE, root / "sympathy", symlinks=True,
                    ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "demos", "cuda_src"))
    (root / "setup.py").write_text("# a checkout\n")
    (root / "c_src").mkdir()
    return root


def _python(code: str, cwd: Path, *flags: str, env_path: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if env_path:
        env["PYTHONPATH"] = env_path
    return subprocess.run([sys.executable, *flags, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env=env)


def test_an_unbuilt_checkout_first_on_the_path_takes_the_installed_modules(unbuilt_checkout):
    # The newcomer's case: `pip install .`, then `python -m pytest` or a script in the checkout.
    done = _python("import sympathy, sympathy.ring.buffer; print(sympathy.__path__[0]); print(sympathy.ring.buffer.__file__)",
                   unbuilt_checkout, env_path=str(package_parent()))
    assert done.returncode == 0, done.stderr
    path, ring = done.stdout.split()
    assert Path(path) == PACKAGE and Path(ring).parent == PACKAGE / "ring"
    assert "CheckoutNotBuiltWarning" in done.stderr and "pip install -e" in done.stderr


def test_an_unbuilt_checkout_with_no_build_anywhere_says_what_to_run(unbuilt_checkout):
    # -S: no site-packages, so no installed sympathy either (the check runs before numpy is needed).
    done = _python("import sympathy", unbuilt_checkout, "-S")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: sympathy._") and "not built in the checkout" in last
    assert 'pip install -e ".[test]"' in last and "build_ext --inplace" in last


def test_a_built_package_imports_without_a_warning():
    done = _python("import sympathy", package_parent(), "-W", "error::UserWarning")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("name", ["matmul", "softmax", "topology"])
def test_import_as_gives_the_module_and_calling_it_calls_its_function(name):
    import importlib
    import pickle
    import types

    module = importlib.import_module(f"sympathy.{name}")
    exec(f"import sympathy.{name} as m", globals())
    assert m is module and isinstance(m, types.ModuleType) and getattr(sympathy, name) is module   # noqa: F821
    assert pickle.loads(pickle.dumps(module)) is module
    assert "(" in str(__import__("inspect").signature(module))


def test_sy_matmul_and_sy_topology_still_call():
    import numpy as np

    a = np.arange(4.0).reshape(2, 2)
    np.testing.assert_array_equal(sympathy.matmul(a, a, kernel="ijk"), a @ a)
    assert sympathy.topology(with_gpu=False).line_bytes > 0


@pytest.mark.skipif(not (CHECKOUT / "setup.py").is_file(), reason="needs the checkout's setup.py")
def test_the_build_stops_naming_cffi_when_cffi_is_not_importable(tmp_path):
    # What `pip install --no-build-isolation .` meets where cffi is missing: setuptools would
    # otherwise ignore `cffi_modules` and install a package without its C modules.
    (tmp_path / "cffi.py").write_text("raise ImportError('no cffi here')\n")
    done = subprocess.run([sys.executable, "setup.py", "--name"], cwd=CHECKOUT, capture_output=True, text=True,
                          timeout=120, env=os.environ | {"PYTHONPATH": str(tmp_path)})
    assert done.returncode != 0
    assert "needs cffi" in done.stderr and "pip install cffi" in done.stderr


def _prebuild_module():
    path = CHECKOUT / "sympathy" / "_build" / "cuda_prebuild.py"
    if not path.is_file():
        path = PACKAGE / "_build" / "cuda_prebuild.py"
    spec = importlib.util.spec_from_file_location("cuda_prebuild_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cuda_prebuild_builds_only_with_nvcc_and_a_gpu_and_no_opt_out():
    prebuild = _prebuild_module()
    assert prebuild.arch_of("9.0") == "sm_90a" and prebuild.arch_of("8.6") == "sm_86"
    assert prebuild.arch_of("12.0") == "sm_120"
    assert prebuild.plan({}, "/usr/bin/nvcc", ["sm_90a"]) == (["sm_90a"], "")
    assert prebuild.plan({"SYMPATHY_NO_CUDA_PREBUILD": "1"}, "/usr/bin/nvcc", ["sm_90a"])[0] == []
    assert prebuild.plan({"SYMPATHY_NO_CUDA_PREBUILD": "0"}, "/usr/bin/nvcc", ["sm_90a"])[0] == ["sm_90a"]
    assert prebuild.plan({}, None, ["sm_90a"]) == ([], "no nvcc")
    assert prebuild.plan({}, "/usr/bin/nvcc", []) == ([], "no NVIDIA GPU visible to nvidia-smi")


def test_cuda_prebuild_without_a_gpu_says_so_and_succeeds(tmp_path):
    path = Path(_prebuild_module().__file__)
    # PATH without nvidia-smi: the state of a machine with no NVIDIA driver.
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"PATH": str(tmp_path)})
    assert done.returncode == 0
    assert "not prebuilt" in done.stderr and "sympathy build-cuda" in done.stderr


def test_cuda_prebuild_failure_never_fails_the_install(tmp_path):
    path = Path(_prebuild_module().__file__)
    fake_smi = tmp_path / "nvidia-smi"
    fake_smi.write_text("#!/bin/sh\necho 9.0\n")
    fake_smi.chmod(0o755)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                          env=os.environ | {"PATH": f"{tmp_path}:{os.environ['PATH']}", "SYMPATHY_NVCC": "/bin/false",
                                            "SYMPATHY_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0
    assert "prebuilding the CUDA attention kernels for sm_90a" in done.stderr and "compile on first use" in done.stderr


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_a_first_compile_says_so_before_nvcc_runs_and_a_cached_load_says_nothing(tiny_sources, capfd):
    from sympathy.attention import cuda

    cuda.build("sm_80")
    assert "compiling the CUDA attention kernels for sm_80" in capfd.readouterr().err
    cuda.build("sm_80")
    assert "compiling" not in capfd.readouterr().err


def test_fixed_choices_are_literal_types_and_arrays_are_typed():
    import typing

    import numpy.typing as npt

    from sympathy import lab

    hints = typing.get_type_hints(sympathy.matmul.matmul)
    assert typing.get_args(hints["kernel"]) == sympathy.MATMUL_KERNELS and hints["a"] == npt.ArrayLike
    assert typing.get_args(typing.get_type_hints(sympathy.matmul.matmul_python)["order"]) == ("ijk", "ikj")
    for function, name, choices in ((lab.counter, "kind", lab.COUNTER_KINDS), (lab.visibility, "reader", lab.READERS),
                                    (lab.latency_curve, "pattern", lab.PATTERNS),
                                    (lab.false_sharing, "increment", lab.INCREMENTS)):
        assert typing.get_args(typing.get_type_hints(function)[name]) == choices, function.__name__
