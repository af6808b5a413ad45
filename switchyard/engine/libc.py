"""The C library calls the engine makes to hand memory back to the kernel."""

from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)  # the process's own C library
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_DONTNEED = 4
# glibc's; other C libraries (musl) have none and nothing to trim
_malloc_trim = _libc.malloc_trim if hasattr(_libc, "malloc_trim") else None


def madvise_dontneed(addr: int, length: int) -> None:
    """Drop the pages of ``[addr, addr + length)``: they read as zeros when touched again."""
    if _libc.madvise(addr, length, MADV_DONTNEED) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"madvise(MADV_DONTNEED): {os.strerror(err)}")


def malloc_trim() -> None:
    """Give the allocator's free pages back to the kernel."""
    if _malloc_trim is not None:
        _malloc_trim(0)
