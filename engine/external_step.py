"""An external agent playing a role in a Trellis run: an agent of the workflow with an ``agent``
attachment for that role is not asked a model; the external agent runs in its container through
its adapter, and what it returns goes downstream through the workflow's typed edges like any
agent's output (engine/runner.py checks each handoff against the edge's contract)."""
from __future__ import annotations

from pathlib import Path

from .external.adapter import run_agent
from .external.build import agent_image, executor, is_built
from .external.spec import ExternalAgentError, find_agent
from .roles import StepOutcome, trace_execution
from .sandbox.image import ImageError
from .workflow import Agent, Attachment


def external_for(agent: Agent, role: str) -> Attachment | None:
    return next((x for x in agent.attachments if x.kind == "agent" and x.role in ("", role)), None)


def external_step(ctx, agent: Agent, attachment: Attachment, role: str, bag: dict):
    try:
        spec = find_agent(attachment.name)
        if not is_built(spec):
            return StepOutcome("FAILURE", message=f"{role}: external agent {spec.name}'s image is not built here; "
                                                  f"run `python -m engine.external build {spec.folder}`")
        ref = agent_image(spec)
        root = Path(ctx.store.root).parent / "agent-sandboxes"
        run = run_agent(spec, bag, ctx.task.input_files(), executor(ref, root))
    except (ExternalAgentError, ImageError) as exc:
        return StepOutcome("FAILURE", message=f"{role}: {exc}")
    if run.result is not None:
        trace_execution(ctx, agent, f"external agent {spec.name} ({ref}) as the {role}", run.result)
        ctx.execution_seconds += run.result.duration_s
    if not run.ok:
        return StepOutcome("FAILURE", message=f"{role}: " + "; ".join(run.errors)[:2000])
    return StepOutcome("SUCCESS", run.produced, f"{role}: played by external agent {spec.name} in its container {ref}")
