"""Which built sympathy to import when Python finds a source checkout first.

`python -m pytest`, `python -m sympathy` and a script saved in the checkout put the checkout's root
first on sys.path, so `import sympathy` finds this source tree. After `pip install .` its C modules
live in site-packages, not here. Then the package's submodules are taken from that installed copy
(one line on stderr says so); with no built copy anywhere, the import stops with the command to run.
A checkout built in place (`pip install -e .`, or `python setup.py build_ext --inplace`) is used as is.
"""
from __future__ import annotations

import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
# One compiled module per build script (sympathy/_build/<subject>_build.py makes sympathy._<subject>).
SUBJECTS = tuple(sorted(p.name.removesuffix("_build.py") for p in (HERE / "_build").glob("*_build.py")))
BUILD_IN_PLACE = '`pip install -e ".[test]"` (or `python setup.py build_ext --inplace`)'


class CheckoutNotBuiltWarning(UserWarning):
    """The checkout on sys.path is not built; the installed sympathy's modules are used instead."""


def missing_modules(package_dir: Path) -> list[str]:
    """The compiled modules (sympathy._ring ...) that package_dir lacks."""
    return [f"_{s}" for s in SUBJECTS
            if not any(package_dir.glob(f"_{s}.*.so")) and not any(package_dir.glob(f"_{s}.*.pyd"))]


def _is_checkout(package_dir: Path) -> bool:
    return (package_dir.parent / "setup.py").is_file() and (package_dir.parent / "c_src").is_dir()


def _installed_copy(search_path: list[str]) -> Path | None:
    """A built sympathy package on search_path other than this one."""
    for entry in search_path:
        candidate = Path(entry or ".").resolve() / "sympathy"
        if candidate != HERE and (candidate / "__init__.py").is_file() and not missing_modules(candidate):
            return candidate
    return None


def package_path(path: list[str]) -> list[str]:
    """The package's __path__: this folder when it is built, else an installed copy's folder.

    Raises ImportError naming the command to run when no built sympathy can be found.
    """
    missing = missing_modules(HERE)
    if not missing:
        return path
    installed = _installed_copy(sys.path)
    if installed is not None:
        warnings.warn(f"sympathy: {HERE} is a source checkout whose C modules are not built; using the "
                      f"installed sympathy in {installed} instead (to use the checkout, build it in place: "
                      f"{BUILD_IN_PLACE})", CheckoutNotBuiltWarning, stacklevel=3)
        return [str(installed)]
    names = ", ".join(f"sympathy.{m}" for m in missing)
    if _is_checkout(HERE):
        raise ImportError(f"{names} not built in the checkout {HERE.parent}: run {BUILD_IN_PLACE} there, "
                          "or `pip install .`")
    raise ImportError(f"{names} missing from the installed sympathy in {HERE}: reinstall it "
                      "(`pip install --force-reinstall sympathy`; the build needs a C compiler and cffi)")
