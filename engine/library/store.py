"""The library as a whole: the starter library shipped with Trellis, the knowledge base's entries
as reference resources, a user's own folder (which overrides a shipped artifact of the same
name), and the tools a run discovered from its MCP servers.

Files are the truth (a library can be copied, diffed and edited by hand); a file that cannot be
read is listed in ``problems`` with the reason and left where it is, never deleted or half-read.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Iterable

from .. import places
from ..artifacts import write_text_atomically
from ..contracts import parse_type
from ..errors import ContractSyntaxError
from ..external.spec import load_agents
from ..knowledge import KNOWLEDGE_DIR, load_knowledge
from .artifact import LibraryArtifact, LibraryError, parse_artifact, read_artifact, version_of

STARTER_DIR = Path(__file__).resolve().parent / "starter"
USER_DIR_ENV = "TRELLIS_LIBRARY"



def user_dir() -> Path:
    return Path(os.environ.get(USER_DIR_ENV) or places.library_dir())


@dataclass
class Library:
    artifacts: dict[str, LibraryArtifact] = field(default_factory=dict)   # by "kind:name"
    problems: list[str] = field(default_factory=list)
    folder: Path | None = None   # where edits are saved

    def __len__(self) -> int:
        return len(self.artifacts)

    def of_kind(self, kind: str) -> list[LibraryArtifact]:
        return [a for a in self.artifacts.values() if a.kind == kind]

    def get(self, key: str) -> LibraryArtifact:
        """By ``kind:name`` (or a bare name when only one artifact has it)."""
        if key in self.artifacts:
            return self.artifacts[key]
        named = [a for a in self.artifacts.values() if a.name == key.split("@")[0].split(":")[-1]]
        if len(named) == 1:
            return named[0]
        raise LibraryError(f"no library artifact {key!r}" if not named else
                           f"{key!r} names {len(named)} artifacts; say which: "
                           + ", ".join(f"{a.kind}:{a.name}" for a in named))

    def add(self, artifact: LibraryArtifact) -> None:
        self.artifacts[f"{artifact.kind}:{artifact.name}"] = artifact

    def save(self, name: str, text: str) -> LibraryArtifact:
        """Write a skill or resource to the user's folder, after checking it reads back; the
        file is replaced whole (a crash leaves the old one), and a broken text writes nothing."""
        if self.folder is None:
            raise LibraryError("this library has no folder to save into")
        artifact = parse_artifact(text, name, str(self.folder / f"{name}.md"))
        self.folder.mkdir(parents=True, exist_ok=True)
        write_text_atomically(self.folder / f"{name}.md", text)
        self.add(artifact)
        return artifact

    def with_tools(self, registry) -> "Library":
        """This library plus the tools ``registry`` discovered, typed by their input schemas."""
        out = Library(dict(self.artifacts), list(self.problems), self.folder)
        for artifact in tool_artifacts(registry):
            out.add(artifact)
        return out


def _read_folder(library: Library, folder: Path, origin: str) -> None:
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.md")):
        if path.is_symlink():  # a library file is a file; a link could point anywhere on the disk
            library.problems.append(f"{path}: a symbolic link, not read")
            continue
        try:
            artifact = read_artifact(path)
        except LibraryError as exc:
            library.problems.append(str(exc))
            continue
        library.add(replace(artifact, source=f"{origin}:{path.name}"))


def knowledge_resources() -> Iterable[LibraryArtifact]:
    """The knowledge base's entries (engine/knowledge) as reference resources."""
    for entry in load_knowledge():
        text = (KNOWLEDGE_DIR / f"{entry.id}.md").read_text(encoding="utf-8")
        yield LibraryArtifact(name=entry.id, kind="resource", title=entry.title, tags=entry.tags,
                              body=entry.render(), when=" ".join(entry.when_to_use.split()),
                              source=f"knowledge:{entry.id}.md", version=version_of(text))


_JSON_TYPES = {"string": "str", "number": "float", "integer": "int", "boolean": "bool", "object": "json",
               "array": "list[any]"}


def tool_artifacts(registry) -> list[LibraryArtifact]:
    """Each discovered MCP tool as a library tool: its arguments typed from the JSON schema (a
    type the contract language has no word for is ``any``), its description what retrieval reads."""
    out = []
    for name, spec in sorted(((registry.specs if registry is not None else {}) or {}).items()):
        props = (spec.input_schema or {}).get("properties") or {}
        inputs = {}
        for arg, schema in list(props.items())[:50]:
            if not isinstance(arg, str) or not arg.isidentifier():
                continue
            kind = _JSON_TYPES.get(schema.get("type") if isinstance(schema, dict) else None, "any")
            try:
                parse_type(kind)
            except ContractSyntaxError:
                kind = "any"
            inputs[arg] = kind
        text = f"{name}\n{spec.description}"
        out.append(LibraryArtifact(name=name, kind="tool", title=spec.tool, inputs=inputs,
                                   outputs={"result": "json"}, body=spec.description[:2000],
                                   when=spec.description[:600], source=f"mcp:{spec.server}",
                                   version=version_of(text)))
    return out


def external_agents(library: Library) -> None:
    """The external agents (engine/external/) as library artifacts of kind ``agent``."""
    agents, problems = load_agents()
    library.problems += problems
    for agent in agents:
        library.add(agent.artifact())


def load_library(folder: Path | None = None, *, overlay: Path | None = None, starter: bool = True,
                 knowledge: bool = True, agents: bool = True, registry=None) -> Library:
    """The library in force: shipped starter, knowledge resources, external agents, then the
    user's ``folder`` (default ``$TRELLIS_LIBRARY`` or var/library), then a project's own
    ``overlay`` (a file there overrides a shared one of the same name; edits are saved there),
    then discovered tools."""
    folder = Path(folder) if folder is not None else user_dir()
    library = Library(folder=folder)
    if starter:
        _read_folder(library, STARTER_DIR, "starter")
    if knowledge:
        for artifact in knowledge_resources():
            library.add(artifact)
    if agents:
        external_agents(library)
    _read_folder(library, folder, "user")
    if overlay is not None:
        _read_folder(library, Path(overlay), "project")
        library.folder = Path(overlay)
    return library.with_tools(registry) if registry is not None else library
