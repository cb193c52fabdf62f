"""`sympathy bench`: suites that race every example against its anchor in one run."""
from .core import Results, Row, Suite, available_suites, run_suite
from .timing import Timing, time_call

__all__ = ["Results", "Row", "Suite", "Timing", "available_suites", "run_suite", "time_call"]
