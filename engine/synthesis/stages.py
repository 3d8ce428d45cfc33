"""Retrieval-based synthesis of a task's first workflow (AgentCo-op): Plan -> Retrieve ->
Synthesize, each traced with its inputs and what it produced; Execute is the search's first
probe of the result, Review its bounded local repair (engine/search/repair.py).

- Plan reads the task tuple x = (goal, context, constraints, resources) and the task's kind,
  and lays out the slots: one per role of the team, each with the typed artifacts it is handed
  and must hand on (the task's own predictions contract among them) and a query saying what
  the role is for on this task. The roles and their order are the team's (the roles Trellis's
  runner knows); what synthesis chooses is what each is given.
- Retrieve asks the library, per slot, for the skills, reference resources and tools that fit
  it by type (engine/library/retrieval.py), ranked by meaning.
- Synthesize builds W = (roles, graph, attachments, interface protocol): the team's graph with
  every edge typed by the contract language, each agent given the best-fitting skill(s) and, for
  the planner, the reference that fits best when one is close enough; each attachment records
  the library version it came from, and the event records why it was chosen.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..external.build import is_built
from ..external.spec import find_agent
from ..harness import ROLE_GIVES, Harness
from ..library.retrieval import Retrieval, Similarity, Slot, retrieve
from ..library.store import Library
from ..protocol.events import SynthesisStage
from ..task import Task
from ..trace import Tracer
from ..workflow import ENGINE_INPUTS, Attachment, Workflow
from .fixed import EVIDENCE, team_workflow

SKILLS_PER_ROLE = 2
SECOND_SKILL_RATIO = 0.85    # a second skill only when it fits nearly as well as the first
REFERENCE_ROLES = ("planner",)
TOOL_ROLES = ("analyzer", "planner")
# How close a reference or a tool must be to the slot's query to be attached at all: a skill that
# fits by type is attached anyway (the type filter already says it is for this role and kind);
# an optional extra needs to be on topic. Per ranking, since cosines and word overlaps differ in scale.
FLOOR = {"embedding": 0.30, "words": 0.06}

ROLE_PURPOSE = {
    "analyzer": "explore the data files and report what they show before anyone models them",
    "planner": "choose the modelling approach that fits what the data and the task say",
    "coder": "write the complete program that fits the model and writes the answer file",
    "debugger": "repair a program that failed to run or failed a check",
    "verifier": "run the program and check its answer file is complete and plausible",
    "router": "decide where the work goes next",
    "finalizer": "hand on the verified answer with a short report",
}


@dataclass
class Synthesis:
    workflow: Workflow
    slots: list[Slot]
    retrievals: dict[str, Retrieval]
    chosen: dict[str, list[dict]] = field(default_factory=dict)   # role -> [{ref, why, similarity}]

    def info(self) -> dict:
        """The StartInfo a search records (engine/protocol/events.py)."""
        n = sum(len(v) for v in self.chosen.values())
        return {"path": "synthesized", "similarity": None, "workflow_name": self.workflow.name,
                "workflow_hash": self.workflow.hash,
                "reason": f"synthesized from the library: {n} attachment(s) over {len(self.chosen)} role(s); "
                          f"{self.ranked_by()}"}

    def ranked_by(self) -> str:
        return next((r.ranked_by for r in self.retrievals.values() if r.ranked_by), "")


def task_tuple(task: Task) -> dict:
    """x = (goal, context, constraints, resources), as synthesis reads it."""
    r = task.resources
    return {"goal": task.goal.strip(), "context": task.context.strip(), "constraints": list(task.constraints),
            "resources": {"files": dict(r.files), "predictions": r.prediction_contract()}}


def artifact_types(task: Task) -> dict[str, str]:
    """The contract type of every artifact a role hands on, on this task."""
    return {"report": "markdown", "plan": "markdown", "final_report": "markdown", "code": "python",
            "execution_evidence": EVIDENCE, "predictions": task.resources.prediction_contract()}


def task_kind_word(task: Task) -> str:
    """The task's answer kind as the library names it: table, series, parameters or field."""
    name = task.assessment().name
    return "table" if name == "rows" else name


def plan(task: Task, base: Workflow | None = None) -> list[Slot]:
    """One slot per role of ``base`` (the team by default), in run order."""
    base = base or team_workflow(task)
    kind = task_kind_word(task)
    types = artifact_types(task)
    slots = []
    for agent_id in base.order():
        agent = base.agent(agent_id)
        offered = {**ENGINE_INPUTS, **agent.inputs}
        for role in agent.roles:
            required = {name: agent.outputs.get(name) or types[name] for name in ROLE_GIVES[role]}
            query = (f"{role}: {ROLE_PURPOSE.get(role, role)}. Task ({kind}): {task.title}. "
                     f"{task.goal.strip()} {task.context.strip()[:800]}")
            slots.append(Slot(role=role, offered=dict(offered), required=required, task_kind=kind, query=query))
            offered.update(required)  # a later role of the same agent is handed what this one made
    return slots


def _floor(similarity: Similarity) -> float:
    return FLOOR["embedding" if similarity.ranked_by.startswith("embedding") else "words"]


def _attachment(hit, role: str) -> Attachment:
    a = hit.artifact
    return Attachment(kind=a.kind, name=a.name, version=a.version, title=a.title,
                      text=a.body if a.kind != "tool" else "", interface=a.interface(), role=role)


def synthesize(task: Task, library: Library, similarity: Similarity, tracer: Tracer | None = None,
               base: Workflow | None = None, name: str | None = None, external_agents: bool = False) -> Synthesis:
    """The synthesized workflow for ``task`` (called ``name``, by default ``<task>-synthesized``),
    each stage traced (``synthesis_stage``).
    ``external_agents``: an external agent whose image is built may play a role it fits (by
    type, and at least as close in meaning as the role's best skill); off by default, so that
    what a synthesized team does never depends on which images a machine happens to have."""
    base = base or team_workflow(task, Harness())
    slots = plan(task, base)
    if tracer is not None:
        tracer.emit(SynthesisStage(stage="plan", inputs={"task": task_tuple(task), "base": base.name},
                                   outputs={"slots": [s.to_dict() for s in slots]},
                                   note=f"{len(slots)} slot(s): the roles of {base.name}, typed by this task"),
                    "synthesis")
    artifacts = list(library.artifacts.values())
    retrievals = {s.role: retrieve(s, artifacts, similarity, ("skill", "resource", "tool", "agent"), limit=4)
                  for s in slots}
    if tracer is not None:
        tracer.emit(SynthesisStage(stage="retrieve", inputs={"library": len(artifacts),
                                                            "library_problems": library.problems[:20]},
                                   outputs={"retrievals": {r: v.to_dict() for r, v in retrievals.items()}},
                                   note=f"ranked by {similarity.ranked_by}; type-incompatible artifacts refused "
                                        f"with the reason"), "synthesis")
    floor = _floor(similarity)
    chosen: dict[str, list[dict]] = {}
    agents = []
    for agent in base.agents:
        attachments, tools = list(agent.attachments), list(agent.tools)
        for role in agent.roles:
            got = retrievals[role]
            picked = _pick(got, role, floor, external_agents)
            for hit, why in picked:
                attachments.append(_attachment(hit, role))
                if hit.artifact.kind == "tool" and hit.artifact.name not in tools:
                    tools.append(hit.artifact.name)
                chosen.setdefault(role, []).append({**hit.to_dict(), "agent": agent.id, "why": why})
        agents.append(replace(agent, attachments=tuple(attachments), tools=tuple(tools)))
    workflow = replace(base, name=name or f"{task.name}-synthesized", agents=tuple(agents),
                       note=(base.note + "; " if base.note else "")
                       + f"synthesized from the library ({similarity.ranked_by})").validate()
    result = Synthesis(workflow, slots, retrievals, chosen)
    if tracer is not None:
        tracer.emit(SynthesisStage(stage="synthesize", inputs={"base": base.name},
                                   outputs={"workflow": workflow.to_dict(), "attachments": chosen,
                                            "interface": [e.to_dict() for e in workflow.edges]},
                                   note=result.info()["reason"]), "synthesis")
    return result


def _pick(got: Retrieval, role: str, floor: float, external_agents: bool = False) -> list[tuple]:
    skills = [h for h in got.hits if h.artifact.kind == "skill"]
    if external_agents:
        best = skills[0].similarity if skills else floor
        for hit in (h for h in got.hits if h.artifact.kind == "agent" and h.similarity >= max(best, floor)):
            if is_built(find_agent(hit.artifact.name)):
                return [(hit, f"the external agent {hit.artifact.name} fits the {role}'s slot by type and is at least "
                              f"as close as its best skill ({hit.similarity:.3f}); it plays the role in its container")]
    out = []
    if skills:
        out.append((skills[0], f"the best-fitting {role} skill by type and meaning ({skills[0].similarity:.3f})"))
        if len(skills) > 1 and len(out) < SKILLS_PER_ROLE and skills[1].similarity >= SECOND_SKILL_RATIO * skills[0].similarity \
                and skills[1].similarity >= floor:
            out.append((skills[1], f"fits nearly as well as the first ({skills[1].similarity:.3f})"))
    if role in REFERENCE_ROLES:
        refs = [h for h in got.hits if h.artifact.kind == "resource" and h.similarity >= floor]
        if refs:
            out.append((refs[0], f"the reference closest to this task ({refs[0].similarity:.3f} >= {floor})"))
    if role in TOOL_ROLES:
        tools = [h for h in got.hits if h.artifact.kind == "tool" and h.similarity >= floor]
        if tools:
            out.append((tools[0], f"the discovered tool closest to this role's work ({tools[0].similarity:.3f} >= {floor})"))
    return out
