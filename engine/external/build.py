"""Build an external agent's image from local material, then test it, as the sandbox image is
built (engine/sandbox/image.py): its ``requirements.txt`` installed with the host's pip into a
layer of its own, its folder copied in, on top of the Trellis sandbox image (Python and the
science stack); no registry. The self-test then runs in a container of the new image; an image
whose test fails is removed and the build fails with the test's output. A failed dependency
install (a network hiccup) is tried again; a failed test is the agent's own bug and is not.

    python -m engine.external build external_agents/data-profiler [--rebuild]
    python -m engine.external run external_agents/data-profiler examples/diabetes-progression
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from packaging.requirements import InvalidRequirement, Requirement

from ..sandbox import ExecutionRequest
from ..sandbox.docker_executor import DockerExecutor
from ..sandbox.image import BUILD_HINT, ImageError, docker_client, image_present, image_ref
from ..task import load_task
from .adapter import AGENT_DIR, SITE_DIR, run_agent, selftest_program
from .spec import ExternalAgent, ExternalAgentError, load_agent

INSTALL_ATTEMPTS = 2


def agent_image(agent: ExternalAgent) -> str:
    return agent.image_ref(image_ref())


def is_built(agent: ExternalAgent) -> bool:
    try:
        return image_present(docker_client(), agent_image(agent))
    except ImageError:
        return False


def checked_requirements(agent: ExternalAgent) -> list[str]:
    """The agent's requirements, each a plain PEP 508 requirement of a package by name. Wheels
    alone are installed: building a source distribution, a local folder or a URL runs its
    ``setup.py`` on the host, as the engine's user (root) with the Docker socket in reach, so
    such a line (and any pip option, which could name another index or file) is refused by name."""
    path = agent.folder / "requirements.txt"
    if not path.is_file():
        return []
    wanted, problems = [], []
    for n, raw in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            problems.append(f"line {n}: {line[:80]!r} is not a package requirement (pip options, paths and "
                            "URLs are not taken)")
            continue
        if requirement.url:
            problems.append(f"line {n}: {requirement.name} is named by a URL; name a package from the index")
            continue
        wanted.append(str(requirement))
    if problems:
        raise ExternalAgentError(f"agent {agent.name}: requirements.txt: " + "; ".join(problems))
    return wanted


def _install(agent: ExternalAgent, site: Path, out: TextIO) -> None:
    site.mkdir(parents=True, exist_ok=True)
    wanted = checked_requirements(agent)
    if not wanted:
        return
    # --only-binary: a package with no wheel is refused, never built (its setup.py would run here)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-warn-script-location", "--only-binary=:all:",
           "--target", str(site), *wanted]
    for attempt in range(1, INSTALL_ATTEMPTS + 1):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode == 0:
            shutil.rmtree(site / "bin", ignore_errors=True)
            return
        out.write(f"agent {agent.name}: pip install failed (attempt {attempt}): {done.stderr.strip()[-400:]}\n")
        time.sleep(2 * attempt)
    raise ExternalAgentError(f"agent {agent.name}: its requirements could not be installed: {done.stderr.strip()[-800:]}")


def executor(ref: str, root: str | Path, keep: bool = True):
    """A Docker sandbox of the agent's image whose programs may read the agent's code."""
    return DockerExecutor(root=root, keep=keep, image=ref, extra_read_paths=(AGENT_DIR, SITE_DIR))


def build(folder: Path, out: TextIO = sys.stdout, rebuild: bool = False) -> str:
    """Build and test the agent in ``folder``; returns its image reference."""
    import docker

    agent = load_agent(folder)
    client = docker_client()
    base = image_ref()
    if not image_present(client, base):
        raise ImageError(f"the agent is built on the Trellis sandbox image {base}, which is not built: run `{BUILD_HINT}`")
    ref = agent.image_ref(base)
    if image_present(client, ref) and not rebuild:
        out.write(f"agent {agent.name}: image {ref} is up to date\n")
        return ref
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="trellis-agent-build-") as tmp:
        work = Path(tmp)
        _install(agent, work / "site", out)
        (work / "agent").mkdir()
        for path in agent.files():
            target = work / "agent" / path.relative_to(agent.folder)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        (work / "Dockerfile").write_text(
            f"FROM {base}\nCOPY agent {AGENT_DIR}\nCOPY site {SITE_DIR}\n"
            f'LABEL trellis.agent="{agent.name}" trellis.base="{base}"\n', encoding="utf-8")
        try:
            client.images.build(path=str(work), tag=ref, rm=True, forcerm=True, network_mode="none")
        except docker.errors.BuildError as exc:
            log = "".join(str(s.get("stream") or s.get("error") or "") for s in exc.build_log)
            raise ExternalAgentError(f"agent {agent.name}: docker build failed: {exc}\n{log[-1500:]}") from exc
    out.write(f"agent {agent.name}: built {ref} in {time.monotonic() - started:.0f} s; testing it\n")
    problem = selftest(agent, ref)
    if problem:
        try:
            client.images.remove(ref)
        except docker.errors.APIError:
            pass
        raise ExternalAgentError(f"agent {agent.name}: its self-test failed in the new image, which was removed: {problem}")
    out.write(f"agent {agent.name}: self-test passed\n")
    return ref


def selftest(agent: ExternalAgent, ref: str) -> str:
    """'' when the agent's self-test passes in ``ref``; else what it printed."""
    if not agent.selftest:
        return ""
    with tempfile.TemporaryDirectory(prefix="trellis-agent-test-") as tmp:
        result = executor(ref, tmp, keep=False).run(ExecutionRequest(code=selftest_program(agent)))
    if result.status == "ok":
        return ""
    return f"{result.status} (exit {result.exit_code}): {(result.stderr or result.stdout).strip()[-1200:]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.external")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build an external agent's image and run its self-test in it")
    b.add_argument("folder")
    b.add_argument("--rebuild", action="store_true")
    r = sub.add_parser("run", help="run a built agent on a task, through its adapter, and print what it returns")
    r.add_argument("folder")
    r.add_argument("task")
    args = parser.parse_args(argv)
    try:
        if args.command == "build":
            build(Path(args.folder), rebuild=args.rebuild)
            return 0
        agent = load_agent(Path(args.folder))
        task = load_task(args.task)
        with tempfile.TemporaryDirectory(prefix="trellis-agent-run-") as tmp:
            run = run_agent(agent, {"task": task.description()}, task.input_files(),
                            executor(agent_image(agent), tmp))
            for error in run.errors:
                print(f"error: {error}", file=sys.stderr)
            for name, value in run.produced.items():
                print(f"--- {name} ---\n{value}")
        return 0 if run.ok else 1
    except (ExternalAgentError, ImageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
