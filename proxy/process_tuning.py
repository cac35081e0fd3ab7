"""Heap and garbage-collector settings for a serving process (the proxy, the store writer).

Heap: glibc returns the top of the heap to the kernel once 128 KiB are free there, so a
request that parses and re-serialises a large body frees that memory, and the next
request faults the same pages in again, at more cost than the parse itself. Raising
the trim and mmap thresholds keeps up to :data:`TRIM_BYTES` of free heap around (freed
memory is still reused by the process); blocks above :data:`MMAP_BYTES`, such as
multi-megabyte bodies, still get their own mapping and are handed back when freed (a
higher threshold let concurrent large requests grow peak memory: bench/NOTES.md).

Applied by ``handoff serve`` unless the environment already sets any ``MALLOC_*``
variable, so an operator's own glibc tuning always wins.
"""

from __future__ import annotations

import ctypes
import gc
import os
import platform

GC_YOUNG_THRESHOLD = 20_000
"""Allocations between young garbage collections in a serving process (CPython: 700):
at 700 the collector ran every request or two and walked every in-flight request's
objects again and again (see ``proxy.server.app``)."""

M_TRIM_THRESHOLD = -1
M_TOP_PAD = -2
M_MMAP_THRESHOLD = -3

TRIM_BYTES = 32 << 20
TOP_PAD_BYTES = 4 << 20
MMAP_BYTES = 1 << 20


def tune_malloc() -> bool:
    """Set the thresholds; True if they were set (glibc only, and not overridden)."""
    if any(k.startswith("MALLOC_") for k in os.environ):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    # Setting any one of these turns glibc's dynamic mmap threshold off: set all three.
    return all(
        libc.mallopt(param, value) == 1
        for param, value in (
            (M_MMAP_THRESHOLD, MMAP_BYTES),
            (M_TRIM_THRESHOLD, TRIM_BYTES),
            (M_TOP_PAD, TOP_PAD_BYTES),
        )
    )


def raise_gc_threshold() -> tuple[int, int, int]:
    """Collect the young generation every :data:`GC_YOUNG_THRESHOLD` allocations;
    returns the thresholds before, to put back."""
    before = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *before[1:])
    return before


def yield_to_requests() -> bool:
    """Schedule this process as batch work (Linux ``SCHED_BATCH``): it keeps its fair
    share of CPU over time, but waking up (a batch arrived on its pipe) no longer
    preempts whatever runs, such as the client or upstream a turn is waiting on.
    Returns True if set."""
    try:
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused
        return False
    return True


OPEN_FILES_CEILING = 65536
"""The open-file limit handoff raises its own to, at most: 32k connections' worth."""


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft open-file limit (RLIMIT_NOFILE) as far as the hard limit allows, up
    to :data:`OPEN_FILES_CEILING`: each connection holds a descriptor, and the common soft
    limit of 1024 runs out at a few hundred connections. Returns the limit before and after
    (equal when it could not be raised, or the platform has none)."""
    try:
        import resource
    except ImportError:  # Windows
        return OPEN_FILES_CEILING, OPEN_FILES_CEILING
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited:
        return soft, soft
    target = OPEN_FILES_CEILING if hard == unlimited else min(hard, OPEN_FILES_CEILING)
    for limit in (target, 10240):  # macOS refuses more than OPEN_MAX when hard is unlimited
        if limit <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        except (ValueError, OSError):
            continue
        return soft, limit
    return soft, soft
