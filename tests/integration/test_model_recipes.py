"""The README's "Using your own model" recipes, run as written: each command line from the README,
its server's URL answered by an OpenAI-compatible stand-in (tests/fake_openai.py) whose answers
are the offline scientist's, so the whole run goes through litellm's real HTTP path. A recipe
whose flags no longer parse, whose model name reaches the server wrong or whose run does not
deliver fails here."""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from engine.offline.scientist import answer as offline_answer
from tests.fake_openai import answer, fake_openai

ROOT = Path(__file__).resolve().parents[2]
_LOCAL_URL = re.compile(r"http://127\.0\.0\.1:\d+")


def readme_recipes() -> list[tuple[str, dict[str, str], list[str]]]:
    """(title, exported variables, argv) of each command in the README's recipe block."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Using your own model"):]
    block = re.search(r"\*\*Recipes\.\*\*.*?```bash\n(.*?)```", section, re.S).group(1)
    out, title, exports = [], "", {}
    for line in block.replace("\\\n", " ").splitlines():
        line = line.strip()
        if line.startswith("#"):
            title = line.lstrip("# ").split(":")[0].split(",")[0]
        elif line.startswith("export "):
            name, _, value = line[len("export "):].partition("=")
            exports[name] = value
        elif line:
            out.append((title, dict(exports), shlex.split(line)))
    return out


RECIPES = readme_recipes()


def test_the_readme_has_a_recipe_for_each_kind_of_server():
    titles = " / ".join(t for t, _, _ in RECIPES)
    assert len(RECIPES) == 4, titles
    for kind in ("llama.cpp", "Ollama", "vLLM", "hosted"):
        assert kind in titles


def _offline(body: dict):
    # the stand-in's answers are the offline scientist's: the run is real, only the brain is scripted
    return answer(offline_answer(body["messages"], seed=0).text)


@pytest.mark.slow
@pytest.mark.parametrize("title, exports, argv", RECIPES, ids=[t.split()[0] for t, _, _ in RECIPES])
def test_a_readme_recipe_runs_as_written(title, exports, argv, tmp_path):
    assert argv[:3] == ["python", "-m", "engine"]
    with fake_openai(default=_offline) as server:
        # the recipe's own URL is answered by the stand-in; a hosted provider's by its base variable
        args = [_LOCAL_URL.sub(server.url, a) for a in argv[1:]]
        env = {k: v for k, v in os.environ.items() if not _model_setting(k)}  # the recipe's flags decide
        env.update({k: "sk-test-not-a-real-key" for k in exports}, LITELLM_LOCAL_MODEL_COST_MAP="True",
                   TRELLIS_MCP_CONFIG="none", OPENAI_API_BASE=server.base_url)
        done = subprocess.run([sys.executable, *args, "--runs-dir", str(tmp_path / "runs"), "--no-single-agent",
                               "--executor", "subprocess"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        sent = server.bodies
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "status: completed" in done.stdout, done.stdout[-2000:]
    models = {b["model"] for b in sent}
    named = argv[argv.index("--model") + 1].split("/", 1)[1]
    assert named in models  # the server is asked for the model the recipe names, without litellm's prefix
    if "--role" in argv:  # a role's own model reaches the server for that role's calls
        rest = argv[argv.index("--role") + 1].partition(":")[2]
        assert re.search(r"model=[^/]+/([^,]+)", rest).group(1) in models
    trace = json.loads(next((tmp_path / "runs").glob("*/trace.jsonl")).read_text().splitlines()[0])
    assert trace["kind"] == "run_started" and all(
        "sk-test" not in json.dumps(e) for e in trace["payload"]["endpoints"].values())  # no key in the trace
    if "--context-tokens" in argv:
        context = int(argv[argv.index("--context-tokens") + 1])
        assert all(b["max_tokens"] <= context for b in sent)


def _model_setting(name: str) -> bool:
    """A TRELLIS_* variable that would change which model serves a role."""
    from engine.models import ENVIRONMENT

    return any(name == v or name.startswith(v + "_") for v in ENVIRONMENT.values())
