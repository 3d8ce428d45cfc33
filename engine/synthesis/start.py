"""Where a run or a search starts (``--start``): the fixed team, a workflow synthesized from the
library, the archive's nearest workflow (falling back to synthesis, as DESIGN.md says), or a
file (a Trellis workflow JSON, or an imported graph: engine/synthesis/imports.py)."""
from __future__ import annotations

from pathlib import Path

from ..embedding import TaskEmbedder
from ..errors import TrellisError
from ..library.retrieval import Similarity
from ..library.store import load_library
from ..task import Task
from ..trace import Tracer
from ..workflow import Workflow
from .fixed import WORKFLOWS, team_workflow
from .imports import open_workflow_file
from .stages import synthesize

START_CHOICES = ("team", "synthesized", "archive")


def synthesized(task: Task, *, tracer: Tracer | None = None, registry=None, library=None, embedder=None,
                base: Workflow | None = None, name: str | None = None, external_agents: bool = False):
    """The Synthesis of ``task`` from ``library`` (default: the library in force plus the tools
    ``registry`` discovered), ranked by ``embedder`` (default: the real sentence model)."""
    if library is None:
        library = load_library(registry=registry)
    elif registry is not None:
        library = library.with_tools(registry)
    if embedder is None:
        embedder = TaskEmbedder()
    return synthesize(task, library, Similarity(embedder), tracer, base=base, name=name,
                      external_agents=external_agents)


def choose_start(task: Task, start: str, *, archive=None, tracer: Tracer | None = None, registry=None,
                 library=None, embedder=None, external_agents: bool = False) -> tuple[Workflow, dict]:
    """The starting workflow named by ``start`` and the StartInfo that records the choice."""
    if start == "team" or start in WORKFLOWS:
        workflow = WORKFLOWS.get(start, team_workflow)(task)
        return workflow, {"path": "de_novo", "similarity": None, "reason": f"--start {start}: the fixed {start} workflow",
                          "workflow_name": workflow.name, "workflow_hash": workflow.hash}
    if start == "synthesized":
        result = synthesized(task, tracer=tracer, registry=registry, library=library, embedder=embedder,
                             external_agents=external_agents)
        return result.workflow, result.info()
    if start == "archive":
        if archive is None:
            raise TrellisError("--start archive needs an archive; this run has none configured (it was turned off, "
                               "or no archive folder is set)")
        made: dict = {}

        def fresh(t: Task) -> Workflow:
            made["synthesis"] = synthesized(t, tracer=tracer, registry=registry, library=library, embedder=embedder,
                             external_agents=external_agents)
            return made["synthesis"].workflow

        warm = archive.start_for(task, synthesize=fresh)
        info = warm.to_dict()
        if "synthesis" in made:
            info["reason"] += f"; {made['synthesis'].info()['reason']}"
            info["path"] = "synthesized"
        return warm.workflow, info

    workflow, source, prior = open_workflow_file(Path(start), task, tracer=tracer)
    info = {"path": "file", "similarity": None, "source": str(start), "reason": source,
            "workflow_name": workflow.name, "workflow_hash": workflow.hash}
    if prior:  # a graph from elsewhere: grounded, then given the library's skills
        result = synthesized(task, tracer=tracer, registry=registry, library=library, embedder=embedder,
                             base=workflow, name=f"{workflow.name}-synthesized", external_agents=external_agents)
        workflow = result.workflow
        info.update(reason=f"{source}; {result.info()['reason']}", workflow_name=workflow.name,
                    workflow_hash=workflow.hash)
    return workflow, info
