"""A person's edit of a run's workflow: a contract, an edge, a role procedure or an agent's
prompt. Every edit goes through the engine's own mutation and validation rules, so an invalid
type or a cycle is refused with the engine's message and nothing changes."""
from __future__ import annotations

from engine.contracts import parse_type
from engine.errors import ContractSyntaxError, WorkflowValidationError
from engine.mutations import Mutation, MutationError
from engine.workflow import Workflow

from .bridge import record_version
from .models import Run, RunStatus, WorkflowVersion


class EditRejected(Exception):
    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("; ".join(problems))


def mutation_from_form(kind: str, form: dict) -> Mutation:
    """The engine mutation a form describes. Raises EditRejected on a malformed form."""
    try:
        if kind == "contract":
            contract = form["contract"].strip()
            try:
                parse_type(contract)
            except ContractSyntaxError as exc:
                raise EditRejected([str(exc)]) from exc
            return Mutation("contract_change", form["edge"], {"contract": contract}, form.get("note", ""))
        if kind == "edge":
            source, rest = form["edge"].split("->", 1)
            target, artifact = rest.split(":", 1)
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
    except (KeyError, ValueError) as exc:
        raise EditRejected([f"the form is incomplete: {exc}"]) from exc
    raise EditRejected([f"unknown kind of edit {kind!r}"])


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
    except MutationError as exc:
        raise EditRejected([str(exc)]) from exc
    # A Mimosa or SciMARS run still going adopts the edit at its next iteration or round (the
    # engine probes it first); any other run keeps it as the latest version straight away.
    waits_for_engine = run.search in ("mimosa", "scimars") and run.status not in {RunStatus.COMPLETED,
                                                                                  RunStatus.CANCELLED}
    return record_version(run, child.to_dict(), author, mutation.describe(), base.iteration,
                          adopted=not waits_for_engine)
