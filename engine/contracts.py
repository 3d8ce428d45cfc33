"""Typed artifact contracts carried by workflow edges.

A small type language, written by scientists in the browser and in workflow JSON:

    python                              source code that must parse
    markdown, str, int, float, bool, sha256, path, json, any
    csv[id:int, y:float]                a CSV file with at least these typed columns
    {exit_code:int, stdout_tail:str}    a record with at least these fields
    {path: sha256}                      a map (single entry whose key is a key type)
    list[float], map[str, int]

The grammar is tiny, so it is parsed by hand rather than with a parser generator.
"""
from __future__ import annotations

import csv
import functools
import io
import math
import re
from dataclasses import dataclass
from typing import Callable, Union

from . import python_ast
from .errors import ContractSyntaxError

PRIMITIVES = frozenset(
    {"str", "text", "markdown", "python", "int", "float", "bool", "sha256", "path", "json", "any"}
)
KEY_TYPES = frozenset({"str", "path"})
_STRINGY = frozenset({"str", "text", "markdown", "python", "sha256", "path"})
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Prim:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class ListOf:
    item: "Type"

    def __str__(self) -> str:
        return f"list[{self.item}]"


@dataclass(frozen=True)
class MapOf:
    key: "Type"
    value: "Type"

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True)
class Record:
    fields: tuple[tuple[str, "Type"], ...]

    def __str__(self) -> str:
        return "{" + ", ".join(f"{k}:{v}" for k, v in self.fields) + "}"

    def field_map(self) -> dict[str, "Type"]:
        return dict(self.fields)


@dataclass(frozen=True)
class CsvOf:
    columns: tuple[tuple[str, "Type"], ...]

    def __str__(self) -> str:
        return "csv[" + ", ".join(f"{k}:{v}" for k, v in self.columns) + "]"


Type = Union[Prim, ListOf, MapOf, Record, CsvOf]


class _Parser:
    _TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_.\-]*)|(.))")

    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, int]] = []
        for m in self._TOKEN.finditer(text):
            if m.group(1):
                self.tokens.append((m.group(1), m.start(1)))
            elif m.group(2):
                self.tokens.append((m.group(2), m.start(2)))
        self.i = 0

    def error(self, problem: str) -> ContractSyntaxError:
        pos = self.tokens[self.i][1] if self.i < len(self.tokens) else len(self.text)
        return ContractSyntaxError(self.text, pos, problem)

    def peek(self) -> str | None:
        return self.tokens[self.i][0] if self.i < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None:
            raise self.error(f"expected {expected!r}, but the type ended" if expected else "unexpected end")
        if expected is not None and tok != expected:
            raise self.error(f"expected {expected!r}, found {tok!r}")
        self.i += 1
        return tok

    def parse(self) -> Type:
        if not self.tokens:
            raise ContractSyntaxError(self.text, 0, "empty type")
        t = self.type_()
        if self.peek() is not None:
            raise self.error(f"unexpected {self.peek()!r} after a complete type")
        return t

    def type_(self) -> Type:
        tok = self.peek()
        if tok == "{":
            return self.braces()
        if tok is None or not (tok[0].isalpha() or tok[0] == "_"):
            raise self.error("expected a type name or '{'")
        name = self.take()
        if name == "csv":
            self.take("[")
            cols = self.fields("]")
            if not cols:
                raise self.error("csv[...] needs at least one column")
            for col, ctype in cols:
                if not isinstance(ctype, Prim) or ctype.name not in {"int", "float", "str", "bool", "any"}:
                    raise self.error(f"csv column {col!r} must be int, float, str, bool or any, not {ctype}")
            return CsvOf(tuple(cols))
        if name == "list":
            self.take("[")
            item = self.type_()
            self.take("]")
            return ListOf(item)
        if name == "map":
            self.take("[")
            key = self.type_()
            self.take(",")
            value = self.type_()
            self.take("]")
            self._check_key(key)
            return MapOf(key, value)
        if name not in PRIMITIVES:
            self.i -= 1
            known = ", ".join(sorted(PRIMITIVES | {"csv[...]", "list[...]", "map[...]"}))
            raise self.error(f"unknown type {name!r}; known types are {known}")
        return Prim(name)

    def _check_key(self, key: Type) -> None:
        if not (isinstance(key, Prim) and key.name in KEY_TYPES):
            raise self.error(f"map keys must be str or path, not {key}")

    def braces(self) -> Type:
        self.take("{")
        fields = self.fields("}")
        if len(fields) == 1 and fields[0][0] in KEY_TYPES:
            return MapOf(Prim(fields[0][0]), fields[0][1])
        if not fields:
            raise self.error("a record needs at least one field")
        return Record(tuple(fields))

    def fields(self, closer: str) -> list[tuple[str, Type]]:
        out: list[tuple[str, Type]] = []
        seen: set[str] = set()
        while self.peek() != closer:
            if out:
                self.take(",")
                if self.peek() == closer:  # tolerate a trailing comma
                    break
            tok = self.peek()
            if tok is None or not (tok[0].isalpha() or tok[0] == "_"):
                raise self.error("expected a field name")
            name = self.take()
            if name in seen:
                self.i -= 1
                raise self.error(f"field {name!r} appears twice")
            seen.add(name)
            ftype: Type = Prim("any")
            if self.peek() == ":":
                self.take(":")
                ftype = self.type_()
            out.append((name, ftype))
        self.take(closer)
        return out


# Every form the parser above accepts, with an example it parses and what it means: the editor's
# hint is built from this (tests/unit/test_contracts_syntax.py parses each example), so it never
# offers a syntax the engine refuses.
SYNTAX: tuple[tuple[str, str, str], ...] = (
    ("name", "markdown", "one of " + ", ".join(sorted(PRIMITIVES))),
    ("list[T]", "list[float]", "a list of T"),
    ("map[K, T]", "map[str, int]", "a map from str or path keys to T"),
    ("{K: T}", "{path: sha256}", "the same map, with braces"),
    ("{field: T, …}", "{exit_code:int, stdout_tail:str}", "a record with at least these fields; a field without a type is any"),
    ("csv[col: T, …]", "csv[id:int, y:float]", "a CSV file with at least these columns, each int, float, str, bool or any"),
)


def parse_type(text: str) -> Type:
    """Parse a contract type, raising :class:`ContractSyntaxError` with a pointer on error."""
    if not isinstance(text, str):
        raise ContractSyntaxError(repr(text), 0, "a contract type must be written as text")
    return _parsed(text)


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> Type:
    # Types are frozen, so one parse serves every edge, agent and handoff that writes the same
    # text (a 1000-agent workflow writes a handful of types 4000 times); a syntax error is not
    # cached and is raised again, with its pointer, each time.
    return _Parser(text).parse()


def is_assignable(produced: Type, expected: Type) -> bool:
    """Can a value of type ``produced`` be handed to a consumer that expects ``expected``?"""
    if produced is expected:  # the same parsed text (parse_type caches): a type satisfies itself
        return True
    if isinstance(expected, Prim):
        if expected.name in {"any", "json"}:
            return True
        if isinstance(produced, Prim):
            if produced.name == expected.name:
                return True
            if expected.name == "float" and produced.name == "int":
                return True
            return expected.name in {"str", "text"} and produced.name in _STRINGY
        return False
    if isinstance(expected, ListOf):
        return isinstance(produced, ListOf) and is_assignable(produced.item, expected.item)
    if isinstance(expected, MapOf):
        return (
            isinstance(produced, MapOf)
            and is_assignable(produced.key, expected.key)
            and is_assignable(produced.value, expected.value)
        )
    if isinstance(expected, Record):
        if not isinstance(produced, Record):
            return False
        have = produced.field_map()
        return all(k in have and is_assignable(have[k], t) for k, t in expected.fields)
    if isinstance(expected, CsvOf):
        if not isinstance(produced, CsvOf):
            return False
        have = dict(produced.columns)
        return all(k in have and is_assignable(have[k], t) for k, t in expected.columns)
    return False


# A file artifact is a reference: {"path": "predictions.csv", "sha256": "..."}; the runner
# supplies a reader that returns the stored bytes for a sha256, or None if it is missing.
FileReader = Callable[[str], Union[bytes, None]]


def check_value(value: object, ctype: Type, read_file: FileReader | None = None, where: str = "value",
                max_errors: int = 20) -> list[str]:
    """Return every way ``value`` breaks ``ctype`` (an empty list means it conforms)."""
    errors: list[str] = []
    _check(value, ctype, read_file, where, errors)
    return errors[:max_errors]


def _describe(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check(value: object, t: Type, read: FileReader | None, where: str, errors: list[str]) -> None:
    if isinstance(t, Prim):
        problem = _check_prim(value, t.name)
        if problem:
            errors.append(f"{where}: {problem}")
    elif isinstance(t, ListOf):
        if not isinstance(value, list):
            errors.append(f"{where}: expected a list, got {type(value).__name__} {_describe(value)}")
            return
        for i, item in enumerate(value):
            _check(item, t.item, read, f"{where}[{i}]", errors)
    elif isinstance(t, MapOf):
        if not isinstance(value, dict):
            errors.append(f"{where}: expected a mapping {t}, got {type(value).__name__} {_describe(value)}")
            return
        for k, v in value.items():
            _check(k, t.key, read, f"{where} key {k!r}", errors)
            _check(v, t.value, read, f"{where}[{k!r}]", errors)
    elif isinstance(t, Record):
        if not isinstance(value, dict):
            errors.append(f"{where}: expected a record {t}, got {type(value).__name__} {_describe(value)}")
            return
        for name, ftype in t.fields:
            if name not in value:
                errors.append(f"{where}: missing field {name!r} (expected {ftype})")
            else:
                _check(value[name], ftype, read, f"{where}.{name}", errors)
    elif isinstance(t, CsvOf):
        _check_csv(value, t, read, where, errors)


def _check_prim(value: object, name: str) -> str | None:
    if name in {"any", "json"}:
        return None
    if name == "bool":
        return None if isinstance(value, bool) else f"expected bool, {_got(value)}"
    if name == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else f"expected int, {_got(value)}"
    if name == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected float, {_got(value)}"
        return None if math.isfinite(value) else f"expected a finite float, got {value}"
    if not isinstance(value, str):
        return f"expected {name} (text), {_got(value)}"
    if name == "python":
        return _python_problem(value) if len(value) <= 200_000 else _python_problem.__wrapped__(value)
    if name == "sha256" and not _SHA256.match(value):
        return f"expected sha256 (64 lowercase hex characters), got {_describe(value)}"
    if name == "path" and (value.startswith("/") or ".." in value.split("/") or not value):
        return f"expected a relative path inside the working directory, got {_describe(value)}"
    return None


def _got(value: object) -> str:
    return f"got {type(value).__name__} {_describe(value)}"


@functools.lru_cache(maxsize=128)
def _python_problem(code: str) -> str | None:
    # the same program is handed on along a chain (coder, debugger, verifier...): parsed once
    try:
        python_ast.parse(code)
    except SyntaxError as exc:
        return f"expected python source, but it does not parse: {exc.msg} (line {exc.lineno})"
    return None


def _check_csv(value: object, t: CsvOf, read: FileReader | None, where: str, errors: list[str]) -> None:
    if not (isinstance(value, dict) and isinstance(value.get("sha256"), str)):
        errors.append(f"{where}: expected a file reference {{path, sha256}} to a {t}, got {_describe(value)}")
        return
    if read is None:
        errors.append(f"{where}: cannot read {value.get('path')!r} to check it against {t}")
        return
    data = read(value["sha256"])
    if data is None:
        errors.append(f"{where}: file {value.get('path')!r} ({value['sha256'][:12]}) is missing from the artifact store")
        return
    try:
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error) as exc:
        errors.append(f"{where}: {value.get('path')!r} is not a readable CSV file ({exc})")
        return
    if not rows:
        errors.append(f"{where}: {value.get('path')!r} is empty; expected a header with {t}")
        return
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if r]
    missing = [c for c, _ in t.columns if c not in header]
    if missing:
        errors.append(f"{where}: {value.get('path')!r} lacks column(s) {', '.join(missing)}; it has {', '.join(header) or 'none'}")
        return
    if not body:
        errors.append(f"{where}: {value.get('path')!r} has a header but no rows")
        return
    for col, ctype in t.columns:
        idx = header.index(col)
        for line_no, row in enumerate(body, start=2):
            cell = row[idx] if idx < len(row) else ""
            problem = _check_cell(cell, ctype.name if isinstance(ctype, Prim) else "any")
            if problem:
                errors.append(f"{where}: {value.get('path')!r} line {line_no}, column {col!r}: {problem}")
                break  # one example per column is enough to act on


def _check_cell(cell: str, name: str) -> str | None:
    if name in {"any", "str"}:
        return None
    if name == "int":
        try:
            int(cell)
        except ValueError:
            return f"expected int, got {cell!r}"
        return None
    if name == "float":
        try:
            x = float(cell)
        except ValueError:
            return f"expected float, got {cell!r}"
        return None if math.isfinite(x) else f"expected a finite float, got {cell!r}"
    if name == "bool":
        return None if cell.strip().lower() in {"true", "false", "0", "1"} else f"expected bool, got {cell!r}"
    return None
