import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
# Commands choose their sandbox "auto"; the suite pins auto to the subprocess sandbox (a CI machine
# has Docker too, and a container per program would cost the suite minutes). The Docker tests ask
# for docker themselves (the docker_image fixture).
os.environ.setdefault("TRELLIS_EXECUTOR", "subprocess")
# Runs start the MCP servers of mcp_servers.json; the suite starts none unless a test names its
# own configuration (the MCP tests do), so every other run keeps its model calls and its seconds.
os.environ.setdefault("TRELLIS_MCP_CONFIG", "none")

if os.environ.get("PYTEST_XDIST_WORKER"):
    # A parallel test worker's settings put its var folder apart (webapp/settings.py). What the
    # tests start (a CLI, a studio) gets that folder as given, not set apart a second time.
    from django.conf import settings as _settings

    os.environ["TRELLIS_VAR_DIR"] = str(_settings.VAR_DIR)
    del os.environ["PYTEST_XDIST_WORKER"]


@pytest.fixture
def examples() -> Path:
    return EXAMPLES


@pytest.fixture(scope="session")
def light_task(tmp_path_factory) -> Path:
    """examples/discontinuous-1d declaring two validation folds instead of five: for the studio's
    tests, which exercise runs, gates and workers, not the quality of validation; each probe then
    runs its program three times in the sandbox instead of six."""
    import json
    import shutil

    folder = tmp_path_factory.mktemp("light") / "discontinuous-1d"
    shutil.copytree(EXAMPLES / "discontinuous-1d", folder)
    config = json.loads((folder / "Data_config.json").read_text())
    config["validation"] = {"split": "kfold", "folds": 2}
    (folder / "Data_config.json").write_text(json.dumps(config, indent=2))
    return folder


@pytest.fixture(scope="session")
def docker_image() -> str:
    """The Docker sandbox's image, built here only when missing (its tag is the definition's
    hash, so a build serves every later session). Skipped where Docker cannot run, unless
    TRELLIS_REQUIRE_DOCKER=1 (CI, which starts a daemon and builds the image first): then the
    test fails instead, saying why."""
    from engine.sandbox.image import ImageError, build, docker_client, image_present, image_ref

    try:
        ref = image_ref()
        if not image_present(docker_client(), ref):
            build(out=sys.stderr)
        return ref
    except ImageError as exc:
        if os.environ.get("TRELLIS_REQUIRE_DOCKER") == "1":
            pytest.fail(f"TRELLIS_REQUIRE_DOCKER=1 but the Docker sandbox cannot run here: {exc}")
        pytest.skip(f"no Docker sandbox here ({exc}); set TRELLIS_REQUIRE_DOCKER=1 to fail instead")


@pytest.fixture(scope="session")
def studio(django_db_setup, django_db_blocker):
    """A real studio on the test database: embedded Redis, a Celery worker, Daphne."""
    from django.conf import settings

    from tests.studio_harness import Studio

    import shutil

    from django.db import connection

    # Each session starts with an empty workflow archive, so the first run starts de novo.
    shutil.rmtree(settings.TRELLIS_ARCHIVE_DIR, ignore_errors=True)
    s = Studio(settings.VAR_DIR, connection.settings_dict["NAME"]).start()
    yield s
    s.stop()


@pytest.fixture
def demo_user(transactional_db):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user("ada", password="lovelace-1843")


@pytest.fixture
def confined(tmp_path, monkeypatch):
    """The science MCP server confined to a task folder of its own: data/train.csv (a noisy power law),
    a held-out file beside data/ and a symlink to it planted in data/ (tests/unit/test_mcp_tools.py and
    tests/adversarial/test_mcp_tool_inputs.py)."""
    data = tmp_path / "task" / "data"
    data.mkdir(parents=True)
    (tmp_path / "task" / "heldout.csv").write_text("x,y\n1,2\n")
    xs = [1 + i * 0.25 for i in range(40)]
    rows = "\n".join(f"{x},{3 * x ** 1.5 * (1 + 0.01 * ((i % 5) - 2))}" for i, x in enumerate(xs))
    (data / "train.csv").write_text("x,y\n" + rows + "\n")
    (data / "escape.csv").symlink_to(tmp_path / "task" / "heldout.csv")
    monkeypatch.setenv("TRELLIS_MCP_DATA", str(data))
    monkeypatch.setenv("TRELLIS_MCP_BASE", str(tmp_path / "task"))
    monkeypatch.setenv("TRELLIS_MCP_OUTPUT", str(tmp_path / "out"))
    return tmp_path


# The longest single test (a real model on a CPU, 2-3 minutes) starts first: begun last, it would
# leave the other worker idle for its whole length at the end of the suite.
_FIRST = ("tests/integration/test_real_model.py::test_smollm2_through_llama_cpp_end_to_end",)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test that had a studio running says what its processes last logged (a run that
    never started, a worker stuck before its first model call), in the report CI prints."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    from tests.studio_harness import LIVE

    for live in LIVE:
        report.sections.append((f"studio logs under {live.logs}", live.log_tails()))


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.nodeid not in _FIRST)  # stable: every other test keeps its order
