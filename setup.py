"""Build hook for the C modules: every sympathy/_build/<subject>_build.py is a cffi module.

setuptools reads everything else from pyproject.toml; only `cffi_modules` has no pyproject spelling.
The CUDA sources (cuda_src/) ship as package data and are compiled by nvcc on first use instead
(sympathy/attention/cuda.py): a wheel must install on machines with no CUDA toolkit.
"""
from pathlib import Path

from setuptools import setup

HERE = Path(__file__).resolve().parent
BUILD_SCRIPTS = sorted(
    f"sympathy/_build/{p.name}:ffibuilder" for p in (HERE / "sympathy" / "_build").glob("*_build.py")
)
setup(
    cffi_modules=BUILD_SCRIPTS,
    # demos/ and cuda_src/ live at the top of the checkout, where a reader looks for them, and ship
    # inside the wheel as sympathy.demos and sympathy/cuda_src so an installed package has them too.
    package_dir={"sympathy": "sympathy", "sympathy.demos": "demos", "sympathy.cuda_src": "cuda_src"},
    packages=[
        "sympathy",
        "sympathy._build",
        "sympathy.attention",
        "sympathy.bench",
        "sympathy.bench.suites",
        "sympathy.demos",
        "sympathy.cuda_src",
    ],
    package_data={"sympathy.cuda_src": ["*.cu", "*.cuh", "*.h"]},
)
