"""Choosing the sandbox (engine/sandbox/select.py) and defining the Docker sandbox's image
(engine/sandbox/image.py, docker/sandbox/), without a Docker daemon: what a person sees when
Docker is not there, and what decides when the image must be built again."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from engine.sandbox import image
from engine.sandbox.docker_executor import _classify, _signal_code
from engine.sandbox.select import EXECUTOR_KINDS, ExecutorUnavailable, check_kind, make_executor
from engine.sandbox.subprocess_executor import SubprocessExecutor

ROOT = Path(__file__).resolve().parents[2]
NO_DAEMON = "unix:///nonexistent/trellis-test/docker.sock"


@pytest.fixture
def no_daemon(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", NO_DAEMON)
    monkeypatch.delenv("TRELLIS_EXECUTOR", raising=False)


def test_an_unknown_executor_is_refused_with_the_choices():
    with pytest.raises(ExecutorUnavailable, match="auto, docker, subprocess"):
        check_kind("kubernetes")
    assert check_kind(None) == "auto" and check_kind(" Docker ") == "docker"


def test_the_subprocess_sandbox_when_asked_for(tmp_path):
    choice = make_executor("subprocess", tmp_path / "sandboxes")
    assert isinstance(choice.executor, SubprocessExecutor)
    assert choice.executor.root == (tmp_path / "sandboxes").resolve()
    assert choice.describe() == "executor: subprocess (asked for)"


def test_auto_follows_the_operators_pin(tmp_path, monkeypatch):
    monkeypatch.setenv("TRELLIS_EXECUTOR", "subprocess")
    choice = make_executor("auto", tmp_path)
    assert choice.kind == "subprocess" and "TRELLIS_EXECUTOR=subprocess" in choice.reason
    monkeypatch.setenv("TRELLIS_EXECUTOR", "podman")
    with pytest.raises(ExecutorUnavailable, match="not docker or subprocess"):
        make_executor("auto", tmp_path)


def test_auto_without_a_docker_daemon_uses_the_subprocess_sandbox_and_says_why(tmp_path, no_daemon):
    choice = make_executor("auto", tmp_path)
    assert choice.kind == "subprocess"
    assert f"no Docker daemon answers at {NO_DAEMON}" in choice.reason
    assert "start one" in choice.reason and choice.reason.endswith("using the subprocess sandbox")


def test_docker_asked_for_without_a_daemon_fails_before_any_model_call(tmp_path, no_daemon, capsys):
    from engine.cli import main

    runs = tmp_path / "runs"
    code = main(["run", str(ROOT / "examples" / "discontinuous-1d"), "--executor", "docker",
                 "--runs-dir", str(runs), "--no-single-agent"])
    err = capsys.readouterr().err
    assert code == 2
    assert "error: no Docker daemon answers" in err and "dockerd" in err
    # no run folder, no trace: nothing was started (the preflight's cache is written only when this
    # process has not checked the task before)
    assert not runs.exists() or sorted(p.name for p in runs.iterdir()) == ["preflight-cache"]


def test_the_image_tag_changes_with_its_definition_only(tmp_path):
    folder = tmp_path / "sandbox"
    shutil.copytree(image.DEFINITION_DIR, folder)
    tag, base = image.definition_tag(folder), image.definition_tag(folder, only=image.BASE_FILES)
    assert image.definition_tag(folder) == tag  # stable: no rebuild when nothing changed
    with open(folder / "Dockerfile", "a") as fh:
        fh.write("LABEL note=changed\n")
    assert image.definition_tag(folder) != tag
    assert image.definition_tag(folder, only=image.BASE_FILES) == base  # the root file system is kept
    with open(folder / "requirements.txt", "a") as fh:
        fh.write("statsmodels==0.14.5\n")
    assert image.definition_tag(folder, only=image.BASE_FILES) != base


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_the_sandbox_image_has_the_science_stack_at_the_projects_versions():
    """A program must import the same versions in a container as in the subprocess sandbox."""
    sandbox, project = _pins(image.DEFINITION_DIR / "requirements.txt"), _pins(ROOT / "requirements.txt")
    for name in ("numpy", "scipy", "pandas", "scikit-learn", "pyoperon", "torch"):
        assert name in sandbox, f"{name} is missing from docker/sandbox/requirements.txt"
    differ = {name: (v, project[name]) for name, v in sandbox.items() if name in project and project[name] != v}
    assert not differ, f"docker/sandbox/requirements.txt pins differ from requirements.txt: {differ}"


def test_building_says_what_is_missing(monkeypatch):
    monkeypatch.setattr(image.shutil, "which", lambda name: None)
    with pytest.raises(image.ImageError, match="apt-get install debootstrap"):
        image._check_can_build()
    monkeypatch.setattr(image.shutil, "which", lambda name: "/usr/sbin/" + name)
    monkeypatch.setattr(image.os, "geteuid", lambda: 1000)
    with pytest.raises(image.ImageError, match="needs root"):
        image._check_can_build()


def test_container_exits_read_as_the_subprocess_sandbox_reads_them():
    assert _signal_code(137) == -9 and _signal_code(0) == 0 and _signal_code(1) == 1
    assert _classify(-9, "", [], wall_timeout=False, oom=True) == "memory"
    assert _classify(-9, "", [], wall_timeout=True, oom=False) == "timeout"
    assert _classify(_signal_code(128 + 24), "", [], wall_timeout=False, oom=False) == "timeout"  # SIGXCPU
    assert _classify(1, "", ["open /etc/shadow"], wall_timeout=False, oom=False) == "violation"
    assert _classify(1, "MemoryError\n", [], wall_timeout=False, oom=False) == "memory"
    assert _classify(-9, "", [], wall_timeout=False, oom=False) == "killed"


def test_the_studio_offers_every_executor():
    from webapp.runs.models import EXECUTOR_CHOICES

    assert tuple(kind for kind, _ in EXECUTOR_CHOICES) == EXECUTOR_KINDS


@pytest.mark.django_db
def test_the_new_run_form_stores_the_sandbox_and_refuses_an_unknown_one(examples):
    from webapp.runs.forms import NewRunForm

    base = {"project": "P", "task_folder": str(examples / "discontinuous-1d"), "iterations": 1, "search": "mimosa",
            "gate_policy": "automatic", "seed": 0, "max_tokens": 100000}
    docker = NewRunForm({**base, "executor": "docker"})
    assert docker.is_valid(), docker.errors
    assert docker.run_options()["executor"] == "docker"
    plain = NewRunForm(base)  # a form posted without the field (an older page): auto
    assert plain.is_valid(), plain.errors
    assert plain.run_options()["executor"] == "auto"
    refused = NewRunForm({**base, "executor": "vm"})
    assert not refused.is_valid() and "executor" in refused.errors


@pytest.mark.django_db
def test_the_run_page_says_which_sandbox_the_run_got_and_why(examples):
    from tests.studio_harness import running_run
    from engine.protocol.events import SearchStarted
    from webapp.runs import fragments
    from webapp.runs.models import Event, Run

    run = running_run(examples / "discontinuous-1d", "p")
    Run.objects.filter(pk=run.pk).update(executor="auto")
    run.refresh_from_db()
    assert "sandbox: auto" in fragments.header(run, None)  # not started yet: what it asked for
    why = "a Docker daemon answers and trellis-sandbox:abc is built"
    started = SearchStarted(search="mimosa", task="t", iterations=1, seed=0, budget={}, workflow_hash="h",
                            start={"path": "de novo"}, workflow={}, executor="docker", executor_reason=why)
    Event.objects.create(run=run, seq=1, ts=0.0, kind=started.kind, payload=started.to_payload())
    header = fragments.header(run, None)
    assert "sandbox: docker (auto)" in header and f'title="{why}"' in header


def test_a_resumed_run_keeps_the_sandbox_it_started_with(tmp_path, no_daemon, monkeypatch):
    """Issue 26 item 7: auto switched a run from subprocess to docker between two attempts. The
    first attempt's choice is kept; only a kind a person names replaces it."""
    from engine.sandbox.select import executor_for_run

    monkeypatch.setenv("TRELLIS_EXECUTOR", "docker")  # auto would now ask for Docker (and find none)
    kept = executor_for_run("auto", tmp_path / "sandboxes", started_with="subprocess")
    assert kept.kind == "subprocess" and "kept from the run's start" in kept.describe()
    with pytest.raises(ExecutorUnavailable):
        executor_for_run("docker", tmp_path / "sandboxes", started_with="subprocess")  # a person's choice wins
    assert executor_for_run("subprocess", tmp_path / "sandboxes", started_with="docker").kind == "subprocess"
    with pytest.raises(ExecutorUnavailable):
        executor_for_run("auto", tmp_path / "sandboxes")  # a first attempt decides afresh
