"""Cost of one benchmark call: wall time is taken by the runner; this module measures memory.

- ``memory_bytes``: peak working memory of the call. On CPU: the peak of the process's resident
  set (``VmRSS`` in ``/proc/self/status``, sampled every 5 ms by a background thread) minus its
  value just before the call, after ``gc.collect()`` and glibc ``malloc_trim(0)`` so that freed
  memory of earlier calls is not counted as headroom. Except in quick mode (where it would cost
  about a quarter more time) or with ``--steady-memory``, blocks of 1 MiB and more are mmapped
  (:func:`steady_allocator`), so that a freed tensor leaves the resident set at once. It covers
  the KV cache, activations, attention readouts and retrieval structures; the weights are in the
  baseline. On CUDA: ``torch.cuda.max_memory_allocated`` above the allocation before the call.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import threading
from typing import Any


def _rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _trim_heap() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def steady_allocator() -> None:
    """Make glibc mmap every block of 1 MiB or more, so a freed tensor leaves the resident set at once.

    Resident memory then follows live memory instead of glibc's adaptive threshold (which made the
    same 8K cases measure 0.82x to 1.13x across runs); allocations get slower (page faults).
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


class PeakMemory:
    """Peak memory growth during a ``with`` block (see the module docstring for what is measured)."""

    def __init__(self, device: str = "cpu", interval: float = 0.005) -> None:
        self.device = device
        self.interval = interval
        self.peak = 0
        self._base = 0  # bytes at __enter__
        self._max = 0  # the largest resident set sampled since (CPU only)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._max = max(self._max, _rss_bytes())

    def __enter__(self) -> PeakMemory:
        _trim_heap()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
            return self
        self._base = self._max = _rss_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            self.peak = max(0, torch.cuda.max_memory_allocated() - self._base)
            return
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self._max = max(self._max, _rss_bytes())
        self.peak = max(0, self._max - self._base)


def engine_device(engine: Any) -> str:
    model = getattr(getattr(engine, "backend", None), "model", None)
    if model is None:
        return "cpu"
    try:
        return str(next(model.parameters()).device)
    except (AttributeError, StopIteration, TypeError):
        return "cpu"


def machine_state() -> dict[str, Any]:
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(load[0], 2),
    }
