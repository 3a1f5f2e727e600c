"""Cyclic garbage collection paused around import and export."""
from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses the cyclic collector for the block. Import and export allocate
    a few containers per node that all live until they end, so each
    collection scans a growing heap and frees nothing (~10% of a
    10**4-node import). Reference counting still frees everything acyclic;
    the collector resumes, as it was, at the end."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
