"""Fork: from any point of a search, finished or still going, a new run that starts from that
point's workflow, edited by the person first (LangGraph Studio's "time travel").

The points are the run's workflow versions: each is the workflow the search had adopted after an
iteration (or a person's edit). The fork is a run of its own (same task, search, gate, model and
sandbox unless changed; the iterations left, unless changed), whose search starts from the edited
workflow instead of the archive's nearest or the task's de novo team: its first checkpoint holds
only that start, which engine/evolve.py takes as the initial workflow. The edit is checked as the
engine checks any workflow (its shape, contracts, a cycle), and every problem is said, with
nothing created."""
from __future__ import annotations

import json

from django.db import transaction

from engine.errors import TrellisError, WorkflowValidationError
from engine.models import EndpointPolicy
from engine.workflow import Workflow

from . import controls
from .models import Run, WorkflowVersion

MAX_WORKFLOW_CHARS = 400_000


class ForkError(ValueError):
    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def parse_workflow(text: str, policy: EndpointPolicy | None = None) -> dict:
    """The edited workflow, checked (an agent's own endpoint against the operator's ``policy``);
    raises ForkError naming every problem."""
    if len(text) > MAX_WORKFLOW_CHARS:
        raise ForkError([f"the workflow is {len(text):,} characters; at most {MAX_WORKFLOW_CHARS:,}"])
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ForkError([f"not JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}"]) from None
    except RecursionError:
        raise ForkError(["not a workflow: its JSON is nested too deeply"]) from None
    if not isinstance(data, dict):
        raise ForkError(["the workflow must be a JSON object with agents, edges and routes"])
    data.pop("hash", None)  # edited by hand: its hash is computed again, not checked
    try:
        workflow = Workflow.from_dict(data)
    except WorkflowValidationError as exc:
        raise ForkError(exc.problems) from None
    except (TrellisError, KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ForkError([f"not a workflow: {exc}"]) from None
    except RecursionError:
        raise ForkError(["not a workflow: it is nested too deeply"]) from None
    problems = workflow.problems()
    if policy is not None and not problems:
        for agent in workflow.agents:
            options = agent.endpoint_options()
            if options is not None:
                problems += policy.problems(options, f"agent {agent.id}")
    if problems:
        raise ForkError(problems)
    return workflow.to_dict()


def editable_text(version: WorkflowVersion) -> str:
    """The version's workflow as the form shows it: without its hash, which an edit changes."""
    return json.dumps({k: v for k, v in version.data.items() if k != "hash"}, indent=2)


def iterations_left(source: Run, version: WorkflowVersion) -> int:
    return max(1, source.iterations - max(0, version.iteration))


def fork_run(source: Run, version: WorkflowVersion, workflow: dict, user, iterations: int | None = None) -> Run:
    """The new run, queued; ``workflow`` as parse_workflow returned it."""
    edited = Workflow.from_dict(workflow).hash != version.hash
    start = {"workflow": workflow, "info": {
        "path": "fork", "source": f"run {source.pk} v{version.number}", "workflow_hash": version.hash,
        "reason": f"forked from run {source.pk} at v{version.number}" + (", edited by a person" if edited else "")}}
    options = {"search": source.search, "iterations": iterations or iterations_left(source, version),
               "gate_policy": source.gate_policy, "seed": source.seed, "model": source.model,
               "model_settings": source.model_settings, "max_tokens": source.max_tokens,
               "single_agent": source.single_agent, "memory": source.memory, "executor": source.executor,
               "forked_from": source, "forked_version": version.number, "checkpoint": {"start": start}}
    with transaction.atomic():
        return controls.start_run(source.task, user, **options)
