"""A module that calls its function of the same name: `sy.matmul(a, b)` and `import sympathy.matmul as m`.

`import sympathy.matmul as m` binds the package's attribute `matmul`; when the package re-exported
the function under the module's name, that attribute was the function and the module was out of reach.
Making the module itself callable keeps both spellings: the module is the attribute, and calling it
calls `module.<its own name>`.
"""
from __future__ import annotations

import importlib
import inspect
import types


class CallableModule(types.ModuleType):
    """A subject module whose call is its main function (sympathy.matmul(...) → sympathy.matmul.matmul(...))."""

    def __call__(self, *args, **kwargs):
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)

    def __reduce__(self):
        # Pickled by name, like a function (multiprocessing, functools.partial(sy.matmul, ...)).
        return importlib.import_module, (self.__name__,)


def make_callable(module: types.ModuleType) -> types.ModuleType:
    """Turn module into a CallableModule; its signature is the function's (help(), IDEs, inspect)."""
    function = getattr(module, module.__name__.rpartition(".")[2])
    module.__class__ = CallableModule
    module.__signature__ = inspect.signature(function)
    return module
