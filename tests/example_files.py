"""What every example task's own test asks of its provenance script."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def assert_make_data_reproduces(task: Path, rels: tuple[str, ...], out: Path) -> None:
    """``make_data.py OUT`` writes each of ``rels`` byte for byte as committed in ``task``."""
    proc = subprocess.run([sys.executable, str(task / "make_data.py"), str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for rel in rels:
        assert (out / rel).read_bytes() == (task / rel).read_bytes(), rel
