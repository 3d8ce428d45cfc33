"""A person's edit of a run's workflow: a contract, an edge, a role procedure, an agent's
prompt or a role's memory policy. Every edit goes through the engine's own mutation and validation rules, so an invalid
type or a cycle is refused with the engine's message and nothing changes."""
from __future__ import annotations

import re

from engine.archive import fit_problems
from engine.contracts import parse_type
from engine.errors import ContractSyntaxError, TrellisError, WorkflowValidationError
from engine.limits import MAX_NAME_CHARS, MAX_NOTE_CHARS, contract_problem, text_problem
from engine.mutations import Mutation, MutationError
from engine.search import registry
from engine.task import load_task
from engine.workflow import Workflow

from .bridge import record_version
from .models import Run, RunStatus, WorkflowVersion


class EditRejected(Exception):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


# Fields that name something in the workflow; longer text than this is no name. Procedures,
# prompts and contracts are bounded by the engine's own validation (engine/limits.py).
_NAME_FIELDS = {"edge": 3 * MAX_NAME_CHARS + 3, "role": MAX_NAME_CHARS, "agent": MAX_NAME_CHARS,
                "new_source": MAX_NAME_CHARS, "new_target": MAX_NAME_CHARS}


def _form_problems(form: dict) -> list[str]:
    problems = [text_problem(f"the {name.replace('_', ' ')}", form[name], cap)
                for name, cap in _NAME_FIELDS.items() if name in form]
    problems.append(text_problem("the note", form.get("note", ""), MAX_NOTE_CHARS))
    return [p for p in problems if p]


def _edge_key(text: str) -> tuple[str, str, str]:
    """(source, target, artifact) from the editor's "source->target:artifact"."""
    source, sep, rest = text.partition("->")
    target, sep2, artifact = rest.partition(":")
    if not (sep and sep2 and source and target and artifact):
        raise EditRejected([f"choose an edge of this workflow (source->target:artifact), not {text[:60]!r}"])
    return source, target, artifact


def _words(text: str) -> list[str]:
    """A comma- or space-separated list from a form field, as typed."""
    return [w for w in re.split(r"[,\s]+", text.strip()) if w]


def memory_params(form: dict) -> dict:
    """One role's memory policy from the editor's fields: record kinds it records, retrieves and
    subscribes to (comma-separated), query hints (comma-separated words) and its limit. The
    engine's workflow rules judge the kinds and the limit."""
    limit = form.get("limit", "").strip()
    if not re.fullmatch(r"[0-9]{1,6}", limit):
        raise EditRejected([f"the record limit is a whole number of records, not {limit[:20]!r}"])
    hints = [h.strip() for h in form.get("hints", "").split(",") if h.strip()]
    return {"role": form["role"], "records": _words(form.get("records", "")),
            "retrieves": _words(form.get("retrieves", "")), "subscribes": _words(form.get("subscribes", "")),
            "hints": hints, "limit": int(limit)}


def mutation_from_form(kind: str, form: dict) -> Mutation:
    """The engine mutation a form describes. Raises EditRejected on a malformed form."""
    problems = _form_problems(form)
    if problems:
        raise EditRejected(problems)
    try:
        if kind == "contract":
            _edge_key(form["edge"])
            contract = form["contract"].strip()
            problem = contract_problem("the contract", contract)  # before parsing: no deep recursion
            if problem:
                raise EditRejected([problem])
            try:
                parse_type(contract)
            except ContractSyntaxError as exc:
                raise EditRejected([str(exc)]) from exc
            return Mutation("contract_change", form["edge"], {"contract": contract}, form.get("note", ""))
        if kind == "edge":
            source, target, artifact = _edge_key(form["edge"])
            old = {"source": source, "target": target, "artifact": artifact}
            contract = form.get("contract", "").strip()
            new = {"source": form["new_source"], "target": form["new_target"], "artifact": artifact,
                   "contract": contract}
            return Mutation("edge_rewiring", form["edge"], {"remove": [old], "add": [new]}, form.get("note", ""))
        if kind == "procedure":
            return Mutation("procedure_refinement", form["role"], {"procedure": form["procedure"].strip()},
                            form.get("note", ""))
        if kind == "prompt":
            return Mutation("prompt_refinement", form["agent"], {"prompt": form["prompt"].strip()}, form.get("note", ""))
        if kind == "memory":
            return Mutation("memory_policy_change", f"memory.{form['role']}", memory_params(form), form.get("note", ""))
    except (KeyError, ValueError) as exc:
        raise EditRejected([f"the form is incomplete: {exc}"]) from exc
    raise EditRejected([f"unknown kind of edit {kind[:40]!r}"])


def _answer_contract_problems(run: Run, base: WorkflowVersion, child: Workflow) -> list[str]:
    """What the edit makes contradict the task's answer contract (predictions of the wrong
    columns or types): refused, as the run would fail its handoff checks on it. What the
    workflow already contradicted before the edit is not this edit's doing."""
    try:
        task = load_task(run.task.folder)
    except TrellisError:
        return []  # a folder that cannot be read now: the run says so itself
    before = set(fit_problems(Workflow.from_dict({**base.data, "hash": None}), task))
    return [p for p in fit_problems(child, task) if p not in before and "predictions" in p]


def apply_edit(run: Run, kind: str, form: dict, username: str) -> WorkflowVersion:
    base = run.current_version
    if base is None:
        raise EditRejected(["this run has no workflow yet; wait for its first version"])
    mutation = mutation_from_form(kind, form)
    author = f"user:{username}"
    mutation = Mutation(mutation.kind, mutation.target, mutation.params,
                        mutation.rationale or f"edited in the studio by {username}", author=author)
    try:
        child = mutation.apply(Workflow.from_dict({**base.data, "hash": None}))
    except WorkflowValidationError as exc:
        raise EditRejected(exc.problems) from exc
    except (MutationError, ValueError) as exc:  # a target the engine cannot read is refused, not a 500
        raise EditRejected([str(exc)]) from exc
    contradictions = _answer_contract_problems(run, base, child)
    if contradictions:
        raise EditRejected(contradictions)
    # A Mimosa or SciMARS run still going adopts the edit at its next iteration or round (the
    # engine probes it first); any other run keeps it as the latest version straight away.
    waits_for_engine = registry.search_class(run.search).adopts_edits and run.status not in {
        RunStatus.COMPLETED, RunStatus.CANCELLED}
    return record_version(run, child.to_dict(), author, mutation.describe(), base.iteration,
                          adopted=not waits_for_engine, change=mutation.to_dict())
