"""sympathy: mechanical sympathy, measured.

    import sympathy as sy
    sy.matmul(a, b, kernel="packed")        # c_src/matmul.c
    sy.RingBuffer(1024, dtype=np.int64)     # c_src/ring.c
    sy.Queue()                              # multiprocessing.Queue on the ring (sympathy/queue.py)
    sy.lab.false_sharing(threads=2)         # c_src/lab.c
    sy.attention.cpu(q, k, v)               # c_src/attention.c

Every subject is one C file and one module; see DESIGN.md for the contract.
"""
__version__ = "0.1.0"

from ._errors import ClosedError, NotSupportedError
from .affinity import pin, pinned
from .cache import CacheReport, cachegrind, counters
from .topology import topology

# ---- subjects: one C file and one module each ----
from . import attention, lab
from .matmul import MATMUL_KERNELS, matmul, matmul_python
from .ring import Consumer, Disruptor, EventHandlerGroup, EventPoller, PollState, RingBuffer
from .queue import JoinableQueue, Queue
from .softmax import online_softmax, softmax
