"""sympathy: mechanical sympathy, measured.

    import sympathy as sy
    sy.matmul(a, b, kernel="packed")        # c_src/matmul.c
    sy.RingBuffer(1024, dtype=np.int64)     # c_src/ring_*.c
    sy.Queue()                              # multiprocessing.Queue on the ring (sympathy/ring/queue.py)
    sy.lab.false_sharing(threads=2)         # c_src/lab.c
    sy.attention.cpu(q, k, v)               # c_src/attention.c

Every subject is one C file and one module; see DESIGN.md for the contract. `sy.matmul`,
`sy.softmax` and `sy.topology` are their modules (`import sympathy.matmul as m` gives the module)
and call their function of the same name (`sy.matmul(a, b)` is `sympathy.matmul.matmul(a, b)`).
"""
__version__ = "0.1.0"

# A source checkout found first on sys.path but never built takes the installed copy's modules.
from ._checkout import package_path as _package_path

__path__[:] = _package_path(__path__)

from ._callable_module import make_callable as _make_callable
from ._errors import ClosedError, NotSupportedError
from .affinity import pin, pinned
from .cache import CacheReport, cachegrind, counters
from . import topology

# ---- subjects: one C file and one module each ----
from . import attention, lab, matmul, softmax
from .matmul import MATMUL_KERNELS, matmul_python
from .ring import Consumer, Disruptor, EventHandlerGroup, EventPoller, JoinableQueue, PollState, Queue, RingBuffer
from .softmax import online_softmax

for _module in (matmul, softmax, topology):
    _make_callable(_module)
del _module
