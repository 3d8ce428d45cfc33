"""Retrieval from the library for one slot of a workflow: type compatibility first (a hard
filter, with the reason an artifact is refused), then similarity of meaning between the slot's
query and the artifact (sentence embeddings; shared words when the embedding model is not
installed, said in the result).

A slot is one role in the workflow being synthesized: the artifacts it is offered (the engine's
inputs and what upstream roles hand it, with their contract types), the artifacts it must
produce (with the task's own types: the predictions contract of this task), the task's kind.
A skill fits the slot when it serves the role, applies to the task's kind, every input it needs
is offered with a type that satisfies it, and every output it declares is one the slot must
produce, with a type that satisfies the slot's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..contracts import is_assignable, parse_type
from ..embedding import Embedder, EmbeddingModelMissing, cosine, embedder_name
from .artifact import LibraryArtifact

TOOL_ROLES = frozenset({"analyzer", "planner", "coder", "verifier", "debugger"})  # roles offered tools


@dataclass(frozen=True)
class Slot:
    role: str
    offered: dict[str, str]     # artifact name -> contract type the role is handed
    required: dict[str, str]    # artifact name -> contract type the role must produce
    task_kind: str
    query: str                  # what the role is for, on this task

    def to_dict(self) -> dict:
        return {"role": self.role, "offered": dict(self.offered), "required": dict(self.required),
                "task_kind": self.task_kind, "query": self.query[:2000]}


def incompatibility(artifact: LibraryArtifact, slot: Slot) -> str | None:
    """Why ``artifact`` cannot serve ``slot``, in words; None when it can."""
    if artifact.kind == "tool":
        return None if slot.role in TOOL_ROLES else f"the {slot.role} is not offered tools"
    if artifact.kind == "agent" and artifact.outputs and not set(slot.required) <= set(artifact.outputs):
        missing = sorted(set(slot.required) - set(artifact.outputs))
        return f"an external agent playing the {slot.role} must hand on {', '.join(missing)} too"
    if artifact.roles and slot.role not in artifact.roles:
        return f"serves {', '.join(artifact.roles)}, not the {slot.role}"
    if artifact.applies_to and slot.task_kind not in artifact.applies_to:
        return f"applies to {', '.join(artifact.applies_to)} tasks, not {slot.task_kind}"
    for name, text in artifact.inputs.items():
        if name not in slot.offered:
            return f"needs input {name!r} ({text}), which the {slot.role} is not handed"
        if not is_assignable(parse_type(slot.offered[name]), parse_type(text)):
            return f"needs {name!r} as {text}, but the {slot.role} is handed {slot.offered[name]}"
    for name, text in artifact.outputs.items():
        if name not in slot.required:
            return f"produces {name!r}, which the {slot.role} does not hand on"
        if not is_assignable(parse_type(text), parse_type(slot.required[name])):
            return f"produces {name!r} as {text}, which does not satisfy this task's {slot.required[name]}"
    return None


@dataclass(frozen=True)
class Hit:
    artifact: LibraryArtifact
    similarity: float

    def to_dict(self) -> dict:
        return {"ref": self.artifact.ref, "kind": self.artifact.kind, "name": self.artifact.name,
                "title": self.artifact.title, "similarity": round(self.similarity, 4),
                "interface": self.artifact.interface(), "source": self.artifact.source}


@dataclass
class Retrieval:
    slot: Slot
    hits: list[Hit]                                  # compatible, most similar first
    refused: list[tuple[str, str]] = field(default_factory=list)   # (ref, why not) for each incompatible one
    ranked_by: str = ""

    def to_dict(self) -> dict:
        return {"slot": self.slot.to_dict(), "hits": [h.to_dict() for h in self.hits],
                "refused": [{"ref": r, "why": w} for r, w in self.refused], "ranked_by": self.ranked_by}


def _words(text: str) -> set[str]:
    return {w[:-1] if len(w) > 4 and w.endswith("s") else w for w in re.findall(r"[a-z0-9]{3,}", text.lower())}


class Similarity:
    """Cosine of sentence embeddings, or shared-word overlap when no embedding model is installed;
    a vector is computed once per text."""

    def __init__(self, embedder: Embedder | None):
        self.embedder = embedder
        self.ranked_by = f"embedding similarity ({embedder_name(embedder)})" if embedder is not None else ""
        self._vectors: dict[str, list[float]] = {}

    def _vector(self, text: str) -> list[float]:
        if text not in self._vectors:
            self._vectors[text] = list(self.embedder.embed(text))
        return self._vectors[text]

    def __call__(self, query: str, text: str) -> float:
        if self.embedder is not None:
            try:
                return cosine(self._vector(query), self._vector(text))
            except EmbeddingModelMissing as exc:
                self.embedder = None
                self.ranked_by = f"shared words (no embedding model: {str(exc)[:200]})"
        if not self.ranked_by:
            self.ranked_by = "shared words (no embedder given)"
        q, t = _words(query), _words(text)
        return len(q & t) / len(q | t) if q and t else 0.0


def retrieve(slot: Slot, artifacts: list[LibraryArtifact], similarity: Similarity, kinds: tuple[str, ...],
             limit: int = 5) -> Retrieval:
    """The ``limit`` artifacts of each of ``kinds`` that fit ``slot``, most similar to its query
    first (ties: name order), and every one refused with the reason."""
    hits, refused = [], []
    for artifact in sorted(artifacts, key=lambda a: (a.kind, a.name)):
        if artifact.kind not in kinds:
            continue
        why = incompatibility(artifact, slot)
        if why:
            refused.append((artifact.ref, why))
            continue
        hits.append(Hit(artifact, similarity(slot.query, artifact.text_for_retrieval())))
    hits.sort(key=lambda h: -h.similarity)
    kept = [h for kind in kinds for h in [x for x in hits if x.artifact.kind == kind][:limit]]
    kept.sort(key=lambda h: -h.similarity)
    return Retrieval(slot, kept, refused, similarity.ranked_by)
