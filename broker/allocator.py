"""glibc malloc tuning for a process whose requests come and go in buffers of megabytes.

glibc gives allocations above ``M_MMAP_THRESHOLD`` their own mapping and unmaps it at ``free``,
but after the first such free it raises the threshold to that size (up to 32 MiB). From then on
buffers of a few MiB (request frames, decompressed batches) come from the per-thread arenas of
the storage threads, and each arena keeps what it once held. Measured with bench/bombs.py: a
flood of zstd decompression bombs (each refused at its 16 MiB limit) left the broker at 1.26 GiB
RSS with the sliding threshold and 0.3 GiB with it fixed at 1 MiB. Setting the threshold
explicitly also turns the sliding off (mallopt(3)).
"""

from __future__ import annotations

import ctypes

#: mallopt's parameter number for the mmap threshold (glibc's malloc.h).
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 1 << 20


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap threshold; False where the C library has no mallopt (musl, macOS)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))
