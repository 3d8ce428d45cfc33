"""A web process settles its heap once it has started (webapp/heap.py): every view is imported
then, and startup's objects are out of the full garbage collection's way, which used to cost an
occasional page request about 120 ms."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_asgi_application_starts_with_its_views_imported_and_startup_frozen(tmp_path):
    probe = ("import gc, sys; import webapp.asgi; "
             "print(gc.get_freeze_count(), 'webapp.runs.views' in sys.modules, 'engine.evolve' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "TRELLIS_VAR_DIR": str(tmp_path), "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-3000:]
    frozen, views, engine = done.stdout.split()
    assert int(frozen) > 50_000 and views == "True" and engine == "True"

