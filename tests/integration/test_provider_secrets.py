"""Issue 37, item 13: a provider that echoes the key ("Incorrect API key provided: <key>", a 401)
put it on the console and three times in trace.jsonl, and credentials inside ``--api-base`` were
printed and traced. Key values and URL credentials are now taken out of everything shown or
stored: the console, the trace, the summary."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_openai import error, fake_openai

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-live-0123456789abcdefTRELLIS"
PASSWORD = "hunter2-very-secret"


@pytest.mark.slow
def test_an_echoed_key_and_url_credentials_are_never_printed_or_traced(tmp_path):
    echo = error(401, f"Incorrect API key provided: {KEY}. You can find your API key at https://example.invalid.",
                 type="invalid_request_error", code="invalid_api_key")
    with fake_openai(default=echo) as server:
        base = server.base_url.replace("http://", f"http://lab:{PASSWORD}@")
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRELLIS_MODEL")}
        env.update(LAB_KEY=KEY, LITELLM_LOCAL_MODEL_COST_MAP="True", TRELLIS_MCP_CONFIG="none")
        done = subprocess.run([sys.executable, "-m", "engine", "run", str(ROOT / "examples" / "discontinuous-1d"),
                               "--model", "openai/fake", "--api-base", base, "--api-key-env", "LAB_KEY",
                               "--runs-dir", str(tmp_path / "runs"), "--no-single-agent", "--executor", "subprocess"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        asked = server.requests
    assert asked, "the provider was never asked"
    console = done.stdout + done.stderr
    assert "Incorrect API key provided: ***" in console, console[-3000:]
    stored = "".join(p.read_text(errors="replace") for p in (tmp_path / "runs").rglob("*") if p.is_file())
    for secret in (KEY, PASSWORD):
        assert secret not in console, f"{secret} on the console"
        assert secret not in stored, f"{secret} in the run's files"
    assert "invalid_api_key" in stored or "Incorrect API key provided: ***" in stored  # the reason is kept
