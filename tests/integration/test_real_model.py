"""A real language model through Trellis (issue 25): SmolLM2-135M-Instruct served by llama.cpp's
OpenAI-compatible server (tests/local_llm.py), and a run recorded with it replayed offline.

SmolLM2 tests the plumbing, not the science: every call must be answered, each answer used or
re-asked with its problem named, and the run must end honestly (delivered, or failed saying why)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.local_llm import unavailable_reason
from tests.studio_harness import free_port

ROOT = Path(__file__).resolve().parents[2]
CASSETTE = ROOT / "tests" / "fixtures" / "cassettes" / "smollm2-discontinuous-1d"
# The settings the cassette was recorded with: a replay must make the very same requests.
MODEL_FLAGS = ["--model", "openai/smollm2-135m", "--context-tokens", "8192", "--max-answer-tokens", "400",
               "--model-timeout", "300", "--structured-output", "json_object"]


def _run(tmp_path: Path, *flags: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    # no MCP servers: the cassette was recorded without them (their tools are part of each request)
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_MCP_CONFIG": "none"}
    done = subprocess.run([sys.executable, "-m", "engine", "run", "examples/discontinuous-1d",
                           "--runs-dir", str(tmp_path / "runs"), "--no-single-agent", "--executor", "subprocess",
                           *MODEL_FLAGS, *flags], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    traces = list((tmp_path / "runs").glob("*/trace.jsonl"))
    events = [json.loads(line) for line in traces[0].read_text().splitlines()] if traces else []
    return done, events


def _honest(done: subprocess.CompletedProcess, events: list[dict]) -> None:
    """Ended with a verdict (no traceback), every answer used or re-asked and named."""
    assert done.returncode in (0, 1), done.stderr[-3000:]
    assert "status:" in done.stdout and "Traceback" not in done.stderr
    kinds = [e["kind"] for e in events]
    assert "run_finished" in kinds
    calls = [e["payload"] for e in events if e["kind"] == "model_call"]
    assert calls and all(c["finish_reason"] for c in calls)
    reasks = [e["payload"] for e in events if e["kind"] == "answer_reasked"]
    asked = [r for r in reasks if r.get("used") is None]
    settled = [r for r in reasks if r.get("used") is not None]
    assert len(asked) == len(settled) and all(r["problem"] for r in asked)  # each re-ask named, and settled
    for finished in (e for e in events if e["kind"] == "agent_finished" and e["payload"]["status"] == "FAILURE"):
        assert finished["payload"]["message"]  # a failure says why


@pytest.mark.slow
def test_a_run_recorded_with_smollm2_replays_offline(tmp_path):
    done, events = _run(tmp_path, "--replay", str(CASSETTE))
    _honest(done, events)
    assert "not in the cassette" not in done.stdout + done.stderr, (
        "the prompts changed since the cassette was recorded: record it again with a local server "
        "(README, 'Using your own model': --cassette)")
    started = next(e for e in events if e["kind"] == "run_started")
    assert started["payload"]["endpoints"]["coder"]["model"] == "openai/smollm2-135m"
    # What SmolLM2 did, as recorded (again for issue 37, when a cut-off answer stopped being used
    # as if whole): every unusable answer re-asked once and named. The analyzer's, the planner's, the
    # coder's and the debugger's answers were cut off at 400 tokens and re-asked with twice the room:
    # the planner's cut plan parsed, yet was re-asked, not used; the coder's program ran and failed
    # its checks, the verifier named no status (RETRY from the checks), and the debugger's re-asked
    # answer held no program: FAILURE, said so, and the run failed naming who did not finish.
    reasks = [e["payload"] for e in events if e["kind"] == "answer_reasked" and e["payload"].get("used") is not None]
    assert {r["role"] for r in reasks} >= {"analyzer", "planner", "coder", "debugger"}
    calls = [e["payload"] for e in events if e["kind"] == "model_call"]
    cut = next(i for i, c in enumerate(calls) if c["finish_reason"] == "length" and not c["purpose"].endswith("re-ask"))
    assert calls[cut + 1]["purpose"].endswith("re-ask") and calls[cut + 1]["max_tokens"] == 2 * calls[cut]["max_tokens"]
    planner = [c for c in calls if c["role"] == "planner"]
    assert planner[0]["finish_reason"] == "length" and planner[1]["purpose"].endswith("re-ask")
    cut = next(i for i, c in enumerate(calls) if c["role"] == "coder" and c["finish_reason"] == "length")
    assert any(c["role"] == "debugger" for c in calls[cut + 2:])  # the failing program went to the debugger
    debugger = [e["payload"] for e in events if e["kind"] == "agent_finished" and e["agent"] == "debugger"][-1]
    assert debugger["status"] == "FAILURE" and "no Python program" in debugger["message"]
    assert "status: failed" in done.stdout and "debugger=FAILURE" in done.stdout


def readme_real_model_recipe() -> str:
    """The README's "A real model on this machine, step by step" block, as a user copies it."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("**A real model on this machine, step by step.**"):]
    return re.search(r"```bash\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_recipe_for_a_real_model_runs_as_written(tmp_path):
    """Issue 37, item 16: the llama.cpp recipe could not be followed from the README alone (no
    install step, requirements-llm.txt never named, nor GGML_NATIVE=OFF, nor where the GGUF is).
    Its block is run here as written, on a free port: install, find the model, serve it, run."""
    reason = unavailable_reason()
    if reason:
        if os.environ.get("TRELLIS_REQUIRE_LLM"):
            pytest.fail(f"TRELLIS_REQUIRE_LLM is set but the local model cannot run: {reason}")
        pytest.skip(reason)
    port = free_port()
    script = readme_real_model_recipe().replace("8080", str(port))
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_MCP_CONFIG": "none"}
    # files, not pipes: the server the recipe leaves in the background holds its output open
    with (tmp_path / "out").open("w") as out_file, (tmp_path / "err").open("w") as err_file:
        shell = subprocess.Popen(["bash", "-e", "-c", script], cwd=ROOT, env=env, stdout=out_file,
                                 stderr=err_file, start_new_session=True)
        try:
            shell.wait(timeout=1500)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(shell.pid, signal.SIGKILL)  # the server the recipe left in the background
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    done = subprocess.CompletedProcess(shell.args, shell.returncode, out, err)
    assert "trace      " in out, (out[-3000:], err[-3000:])
    trace = Path(out.split("trace      ")[1].split()[0])
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    _honest(done, events)
    base = f"http://127.0.0.1:{port}/v1"
    assert f"at {base}" in out and "no price known for openai/smollm2-135m" in out
    assert all(e["payload"]["endpoint"] == base for e in events if e["kind"] == "model_call")
