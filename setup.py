"""Build hook for the C modules: every sympathy/_build/<subject>_build.py is a cffi module.

setuptools reads everything else from pyproject.toml; only `cffi_modules` has no pyproject spelling.
The CUDA sources (cuda_src/) ship as package data and are compiled by nvcc on first use
(sympathy/attention/cuda.py): a wheel must install on machines with no CUDA toolkit. Where nvcc and
a GPU are present, the build compiles them for that GPU too (sympathy/_build/cuda_prebuild.py;
SYMPATHY_NO_CUDA_PREBUILD=1 skips it).
"""
import subprocess
import sys
from pathlib import Path

try:
    import cffi  # noqa: F401  (setuptools silently ignores `cffi_modules` when cffi is missing)
except ImportError:
    sys.exit("sympathy's build needs cffi to compile its C modules, and cffi is not importable here. "
             "Install it first (`pip install cffi`) or build with pip's default build isolation "
             "(drop --no-build-isolation), which installs it from pyproject.toml.")

from setuptools import setup  # noqa: E402
from setuptools.command.build_ext import build_ext  # noqa: E402

HERE = Path(__file__).resolve().parent
BUILD_SCRIPTS = sorted(
    f"sympathy/_build/{p.name}:ffibuilder" for p in (HERE / "sympathy" / "_build").glob("*_build.py")
)


class BuildExtAndCuda(build_ext):
    """The cffi modules, then (best effort, never failing the install) the CUDA kernels for this GPU."""

    def run(self):
        super().run()
        # A child process: the prebuild imports sympathy.attention.cuda from the sources, not this build.
        subprocess.run([sys.executable, str(HERE / "sympathy" / "_build" / "cuda_prebuild.py")], check=False)


setup(
    cffi_modules=BUILD_SCRIPTS,
    cmdclass={"build_ext": BuildExtAndCuda},
    # demos/ and cuda_src/ live at the top of the checkout, where a reader looks for them, and ship
    # inside the wheel as sympathy.demos and sympathy/cuda_src so an installed package has them too.
    package_dir={"sympathy": "sympathy", "sympathy.demos": "demos", "sympathy.cuda_src": "cuda_src"},
    packages=[
        "sympathy",
        "sympathy._build",
        "sympathy.attention",
        "sympathy.lab",
        "sympathy.ring",
        "sympathy.bench",
        "sympathy.bench.suites",
        "sympathy.demos",
        "sympathy.cuda_src",
    ],
    package_data={"sympathy.cuda_src": ["*.cu", "*.cuh", "*.h"]},
)
