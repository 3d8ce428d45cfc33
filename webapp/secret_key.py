"""The studio's SECRET_KEY: set by the operator in production, generated once per install for
the embedded default. Imported by the settings, so it must not import Django's settings."""
from __future__ import annotations

import os
import secrets
from pathlib import Path

# Keys that were ever published with Trellis. Anyone can sign a session cookie with them, so
# no install may use them again, not even as a fallback for old cookies.
PUBLISHED_KEYS = frozenset({"trellis-embedded-development-key-not-for-production"})


def per_install_key(path: Path) -> str:
    """The key in ``path``, created on first use with 50+ random characters, mode 0600.

    The web server, the workers and the studio command read the settings at the same moment
    on a first start: the file appears atomically (a hard link of a finished temporary file),
    so every process reads the same key."""
    try:
        key = path.read_text().strip()
        if key:
            if path.stat().st_mode & 0o077:  # copied or restored with loose permissions
                path.chmod(0o600)
            return key
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(64) + "\n")
    try:
        os.link(tmp, path)  # fails when another process got there first: theirs is the key
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    key = path.read_text().strip()
    if not key:
        raise ValueError(f"{path} is empty; delete it and the studio generates a new key "
                         f"(everyone signs in again)")
    return key
