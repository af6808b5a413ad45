"""Identifiers that must be unique, not secret: request ids, answer ids, admission tickets.

They come from the ``random`` module's generator, not ``os.urandom``: a system call per request
was measurable on the hot path. The generator is seeded from the OS at start and reseeded in each
forked worker (``random`` does that itself), so replicas and workers draw independent sequences;
never use these for anything a caller must not guess (keys, tokens, nonces: ``secrets``).
"""

from __future__ import annotations

from random import getrandbits


def hex_id(nbytes: int) -> str:
    """``2 * nbytes`` lowercase hex digits."""
    return f"{getrandbits(nbytes * 8):0{nbytes * 2}x}"
