"""One typed artifact of the library (AgentCo-op's S): a skill, a reference resource, a tool or an
external agent, with the typed interface synthesis matches against a workflow's slots.

A skill or resource is one markdown file, readable and editable by a scientist:

    # Profile each series before forecasting

    kind: skill
    roles: analyzer
    inputs: task: markdown
    outputs: report: markdown
    applies to: series
    tags: time series, seasonality, gaps

    ## Procedure
    What the agent does, step by step (this text is attached to the agent's prompt).

    ## When to use
    One paragraph: what in a task calls for it (part of what retrieval compares).

Inputs and outputs are written in the contract language of engine/contracts.py, separated by
``;`` (a type may itself hold commas: ``predictions: csv[id:int, y:float]``). ``applies to``
names task kinds (engine/task_kind.py); none means every kind.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..contracts import parse_type
from ..errors import ContractSyntaxError, TrellisError
from ..harness import ROLES
from ..task import markdown_sections

KINDS = ("skill", "resource", "tool", "agent")
TASK_KINDS = ("table", "series", "parameters", "field")
MAX_ARTIFACT_BYTES = 64_000   # a skill's text enters prompts; a book does not belong in one
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
LABELS = ("kind", "roles", "inputs", "outputs", "applies to", "tags")


class LibraryError(TrellisError):
    """A library file that cannot be read as an artifact, or an edit that would break one."""


@dataclass(frozen=True)
class LibraryArtifact:
    name: str
    kind: str
    title: str
    roles: tuple[str, ...] = ()
    inputs: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    applies_to: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    body: str = ""          # a skill's procedure, a resource's text, a tool's description
    when: str = ""          # when to use it
    source: str = ""        # where it came from: a file of the library, an MCP server, a folder
    version: str = ""       # sha256 of its text: an attachment names the version it used

    @property
    def ref(self) -> str:
        return f"{self.kind}:{self.name}@{self.version[:12]}"

    def text_for_retrieval(self) -> str:
        """What retrieval compares with a slot's query: what it is, when to use it, its tags."""
        return "\n".join(p for p in (self.title, self.when, ", ".join(self.tags), self.body[:600]) if p)

    def interface(self) -> str:
        ins = "; ".join(f"{k}: {v}" for k, v in self.inputs.items()) or "-"
        outs = "; ".join(f"{k}: {v}" for k, v in self.outputs.items()) or "-"
        return f"({ins}) -> ({outs})"

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "title": self.title, "roles": list(self.roles),
                "inputs": dict(self.inputs), "outputs": dict(self.outputs), "applies_to": list(self.applies_to),
                "tags": list(self.tags), "body": self.body, "when": self.when, "source": self.source,
                "version": self.version, "ref": self.ref}

    def to_markdown(self) -> str:
        """The file form (what ``parse_artifact`` reads back to the same artifact)."""
        lines = [f"# {self.title}", "", f"kind: {self.kind}"]
        if self.roles:
            lines.append(f"roles: {', '.join(self.roles)}")
        if self.inputs:
            lines.append("inputs: " + "; ".join(f"{k}: {v}" for k, v in self.inputs.items()))
        if self.outputs:
            lines.append("outputs: " + "; ".join(f"{k}: {v}" for k, v in self.outputs.items()))
        if self.applies_to:
            lines.append(f"applies to: {', '.join(self.applies_to)}")
        if self.tags:
            lines.append(f"tags: {', '.join(self.tags)}")
        heading = "Procedure" if self.kind == "skill" else "Text"
        lines += ["", f"## {heading}", self.body.strip(), ""]
        if self.when:
            lines += ["## When to use", self.when.strip(), ""]
        return "\n".join(lines)


def version_of(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _labelled(text: str) -> dict[str, str]:
    """The ``label: value`` lines between the title and the first ``## `` section."""
    head = text.split("\n## ", 1)[0]
    out: dict[str, str] = {}
    for line in head.splitlines()[1:]:
        m = re.match(r"^([a-z ]+):\s*(.*?)\s*$", line)
        if m and m.group(1) in LABELS:
            out[m.group(1)] = m.group(2)
    return out


def parse_interface(text: str, where: str) -> dict[str, str]:
    """``name: type; name: type`` -> {name: type}, each type parsed by the contract language."""
    out: dict[str, str] = {}
    depth, part, parts = 0, "", []
    for ch in text:  # split on ';' outside brackets, so a type may hold any punctuation it needs
        depth += ch in "[{" 
        depth -= ch in "]}"
        if ch == ";" and depth == 0:
            parts.append(part)
            part = ""
        else:
            part += ch
    parts.append(part)
    for piece in filter(None, (p.strip() for p in parts)):
        name, sep, type_text = piece.partition(":")
        name, type_text = name.strip(), type_text.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) or not type_text:
            raise LibraryError(f"{where}: {piece!r} is not `name: type`")
        try:
            parse_type(type_text)
        except ContractSyntaxError as exc:
            raise LibraryError(f"{where}: {name}: {exc.problem} in type {type_text!r}") from exc
        if name in out:
            raise LibraryError(f"{where}: {name!r} is named twice")
        out[name] = type_text
    return out


def _words(text: str) -> tuple[str, ...]:
    return tuple(w.strip().lower() for w in text.split(",") if w.strip())


def parse_artifact(text: str, name: str, source: str = "") -> LibraryArtifact:
    """The artifact a library file holds; LibraryError saying what is wrong and where."""
    where = source or name
    if not NAME.fullmatch(name):
        raise LibraryError(f"{where}: the name {name!r} must be lower-case letters, digits and hyphens "
                           "(at most 64), starting with a letter or digit")
    if len(text.encode("utf-8")) > MAX_ARTIFACT_BYTES:
        raise LibraryError(f"{where}: {len(text.encode('utf-8')):,} bytes; an artifact is at most "
                           f"{MAX_ARTIFACT_BYTES:,} (it is read into prompts)")
    title = re.match(r"^#\s+(.+?)\s*$", text.lstrip("\ufeff").splitlines()[0] if text.strip() else "")
    if not title:
        raise LibraryError(f"{where}: the first line must be the title, `# ...`")
    labels = _labelled(text.lstrip("\ufeff"))
    kind = labels.get("kind", "")
    if kind not in ("skill", "resource"):
        raise LibraryError(f"{where}: `kind:` must be skill or resource (tools come from MCP servers, external "
                           f"agents from their folders), not {kind!r}")
    roles = _words(labels.get("roles", ""))
    unknown = [r for r in roles if r not in ROLES]
    if unknown:
        raise LibraryError(f"{where}: unknown role(s) {', '.join(unknown)}; roles are {', '.join(ROLES)}")
    if kind == "skill" and not roles:
        raise LibraryError(f"{where}: a skill names the role(s) it serves (`roles: planner`)")
    applies = _words(labels.get("applies to", ""))
    wrong = [k for k in applies if k not in TASK_KINDS]
    if wrong:
        raise LibraryError(f"{where}: `applies to:` names {', '.join(wrong)}; task kinds are {', '.join(TASK_KINDS)}")
    sections = markdown_sections(text)
    body = sections.get("procedure" if kind == "skill" else "text", "")
    if not body:
        raise LibraryError(f"{where}: a {kind} needs a `## {'Procedure' if kind == 'skill' else 'Text'}` section")
    return LibraryArtifact(
        name=name, kind=kind, title=title.group(1), roles=roles,
        inputs=parse_interface(labels.get("inputs", ""), f"{where} inputs"),
        outputs=parse_interface(labels.get("outputs", ""), f"{where} outputs"),
        applies_to=applies, tags=_words(labels.get("tags", "")), body=body,
        when=sections.get("when to use", ""), source=source, version=version_of(text))


def read_artifact(path: Path) -> LibraryArtifact:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LibraryError(f"{path}: cannot be read ({exc})") from exc
    return parse_artifact(text, path.stem, str(path))
