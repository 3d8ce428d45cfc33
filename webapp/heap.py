"""A web process's heap, settled once the process has started.

Django, the engine and their libraries leave some 200,000 objects that live as long as the
process. Python's full garbage collection scans all of them; in a web process that came to
about 120 ms, paid by one page request in some fifty (benchmarks/studio_pages.py: the trace page
filtered by kind at p95). ``settle`` imports every view now (and through them the engine) and
moves what startup made into the permanent generation (``gc.freeze``), so a full collection
scans only what requests made since."""
from __future__ import annotations

import gc

from django.urls import get_resolver


def settle() -> int:
    """Import the URLconf's views, collect, freeze; the number of objects frozen."""
    get_resolver().url_patterns  # noqa: B018 - imports every view module, and the engine through them
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
