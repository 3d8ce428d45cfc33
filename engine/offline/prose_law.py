"""A law the task states in its prose, read into code (answer kind ``parameters``).

Scientists write the law they want fitted into the task's text as often as into a law file:

    dS/dt = -beta S I / N,   dI/dt = beta S I / N - gamma I,   dR/dt = gamma I
    S(0) = N - I0,  I(0) = I0,  R(0) = 0

or a closed form of the measured quantity (``B = A0 k1 / (k2 - k1) (exp(-k1 t) - exp(-k2 t))``).
This module finds such equations (``dX/dt = ...``, ``d[X]/dt = ...``, ``X' = ...``, initial values
``X(0) = ...``, a closed form ``TARGET = ...``, numeric constants ``g = 9.81``), parses each right-hand
side with sympy, and sorts every name into the answer's parameters, the states, the time, stated
constants and data columns. What it returns is plain data (``StatedLaw``) that ``python_source``
turns into the functions a generated program integrates and fits (engine/offline/law_fit.py).

Why sympy and not ``eval``: the text is a person's, shown to the engine as data. Every name in
it is made a sympy Symbol (``S``, ``I``, ``N``, ``E``, ``gamma`` are sympy objects otherwise) and
only a short list of functions is let through; text with anything else (a dot, a quote, a
bracket, a dunder) is refused before sympy sees it, and nothing is evaluated (``evaluate=False``).
"""
from __future__ import annotations

import keyword
import re
from dataclasses import dataclass, field

# The functions a law may call, as sympy names; everything else is a symbol.
_FUNCTIONS = {"exp": "exp", "log": "log", "ln": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan",
              "tanh": "tanh", "sinh": "sinh", "cosh": "cosh", "abs": "Abs", "min": "Min", "max": "Max"}
_CONSTANTS = {"pi": "pi"}
# Words of a time column's name (a general cue of how tables name time, not any task's column).
_TIME_WORDS = ("time", "t", "day", "days", "hour", "hours", "hr", "h", "minute", "minutes", "min", "second",
               "seconds", "sec", "s", "week", "weeks", "month", "months", "year", "years", "yr", "age", "step")
_MAX_EXPRESSION = 400
_IDENT = r"[^\W\d]\w*"
_DERIVATIVE = re.compile(rf"\bd\s*\[?\s*({_IDENT})\s*\]?\s*/\s*d\s*({_IDENT})\s*(?:\(\s*\w+\s*\))?\s*=\s*")
_PRIME = re.compile(rf"(?<![\w'])({_IDENT})\s*'\s*(?:\(\s*({_IDENT})\s*\))?\s*=\s*")
_INITIAL = re.compile(rf"(?<![\w'])({_IDENT})\s*\(\s*(?:({_IDENT})\s*=\s*)?0(?:\.0*)?\s*\)\s*=\s*")
_CONSTANT = re.compile(rf"(?<![\w'(])({_IDENT})\s*=\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w.*/^+(-])")
_SAFE_TEXT = re.compile(r"^[\w\s+\-*/^().,]*$")
_UNICODE_OPERATORS = {"\u2212": "-", "\u00b7": "*", "\u22c5": "*", "\u00d7": "*", "\u00b2": "^2", "\u00b3": "^3"}


@dataclass(frozen=True)
class StatedLaw:
    """A law read from prose: an ODE (``rhs`` per state) or a closed form of the target (``value``).

    Expressions are Python source over the names they use; ``constants`` are numbers the text
    states; ``columns`` are the data columns the expressions read per row; ``unknown_initial`` are
    states whose start the text does not give (fitted with the parameters)."""

    names: tuple[str, ...]                     # the answer's parameters
    time: str = ""                             # the ODE's independent variable as written ("t")
    time_column: str = ""                      # the data column holding it
    states: tuple[str, ...] = ()
    observed: str = ""
    rhs: dict[str, str] = field(default_factory=dict)
    initial: dict[str, str] = field(default_factory=dict)
    unknown_initial: tuple[str, ...] = ()
    value: str = ""                            # closed form of the target
    constants: dict[str, float] = field(default_factory=dict)
    columns: tuple[str, ...] = ()

    @property
    def is_ode(self) -> bool:
        return bool(self.rhs)

    def describe(self) -> str:
        if self.is_ode:
            eqs = "; ".join(f"d{s}/d{self.time} = {self.rhs[s]}" for s in self.states)
            starts = ", ".join(f"{s}(0) = {self.initial[s]}" for s in self.states if s in self.initial)
            return (f"{eqs}" + (f"; {starts}" if starts else "")
                    + (f"; unknown start of {', '.join(self.unknown_initial)} (fitted)" if self.unknown_initial else "")
                    + f"; time column `{self.time_column}`")
        return f"{self.observed} = {self.value}"


@dataclass(frozen=True)
class Reading:
    """What the prose gave: a law, or why the equations it holds cannot be used ('' : none seen)."""

    law: StatedLaw | None = None
    problem: str = ""


def _normalise(text: str) -> str:
    for a, b in _UNICODE_OPERATORS.items():
        text = text.replace(a, b)
    return text


def _safe_name(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


def _parse(text: str):
    """A sympy expression of ``text``, or None when it is not a plain formula (never evaluated)."""
    import sympy
    from sympy.parsing.sympy_parser import convert_xor, implicit_multiplication, parse_expr, standard_transformations

    text = text.strip().rstrip(".,;:")
    if not text or len(text) > _MAX_EXPRESSION or not _SAFE_TEXT.match(text) or "__" in text:
        return None
    names = set(re.findall(_IDENT, text))
    local = {}
    for name in names:
        if name in _FUNCTIONS:
            local[name] = getattr(sympy, _FUNCTIONS[name])
        elif name in _CONSTANTS:
            local[name] = getattr(sympy, _CONSTANTS[name])
        else:
            local[_safe_name(name)] = sympy.Symbol(name)
    for name in names:  # a keyword such as `lambda` is a name in a formula, not Python syntax
        if keyword.iskeyword(name):
            text = re.sub(rf"\b{name}\b", _safe_name(name), text)
    try:
        expr = parse_expr(text, local_dict=local, global_dict={"__builtins__": {}, **{
                              n: getattr(sympy, n) for n in ("Add", "Mul", "Pow", "Integer", "Float", "Rational",
                                                             "Symbol")}},
                          transformations=standard_transformations + (implicit_multiplication, convert_xor),
                          evaluate=False)
    except Exception:  # noqa: BLE001 - any failure to parse means: not a formula
        return None
    return expr if isinstance(expr, sympy.Expr) else None


def _right_hand_side(text: str):
    """The formula at the start of ``text``: up to the line's end or the next equation, dropping
    trailing words of prose ("... - k2 B (the decay)") until what is left parses."""
    text = re.split(r"[;\n]|,\s+(?=[^,=]*=)|\.\s|\.$|\s{3,}|\s(?:where|with|for|and|in|at|when|if)\s", text)[0]
    words = text.split()
    for cut in range(len(words), max(0, len(words) - 8), -1):
        expr = _parse(" ".join(words[:cut]))
        if expr is not None:
            return expr
    return None


def _equations(pattern: re.Pattern, text: str) -> list[tuple[tuple[str, ...], object]]:
    out = []
    for m in pattern.finditer(text):
        expr = _right_hand_side(text[m.end():])
        if expr is not None:
            out.append((tuple(g for g in m.groups()), expr))
    return out


def _symbols(expr) -> set[str]:
    return {str(s) for s in expr.free_symbols}


def _pycode(expr, rename: dict[str, str]) -> str:
    import sympy
    expr = expr.xreplace({s: sympy.Symbol(rename.get(str(s), str(s))) for s in expr.free_symbols})
    return sympy.pycode(expr, fully_qualified_modules=True)


def time_column_for(variable: str, columns: list[str], stated: str = "") -> str:
    """The data column holding the law's time: the one the task names, else the one named like the
    variable (``t``, ``t_min``), else the one whose name is a word for time (``day``, ``hours``)."""
    if stated:
        return stated if stated in columns else ""
    lowered = {c: c.lower() for c in columns}
    for c, low in lowered.items():
        if low == variable.lower():
            return c
    for c, low in lowered.items():
        if low.startswith(variable.lower() + "_"):
            return c
    for c, low in lowered.items():
        head = re.split(r"[_\s(\[]", low)[0]
        if head in _TIME_WORDS or low in _TIME_WORDS:
            return c
    return ""


def read_law(prose: str, *, target: str, names: list[str] | tuple[str, ...], columns: list[str] | tuple[str, ...],
             time_column: str = "") -> Reading:
    """The law ``prose`` states for ``target`` with the unknowns ``names``, given the data's
    ``columns`` (features; empty: not known, every other name is then taken for a column)."""
    text = _normalise(prose)
    names = list(names)
    columns = [c for c in columns if c != target]
    derivatives = _equations(_DERIVATIVE, text) + [((m[0], m[1] or "t"), e) for m, e in _equations(_PRIME, text)]
    constants: dict[str, float] = {}
    for m in _CONSTANT.finditer(text):
        name = m.group(1)
        if name not in names and name != target and name not in columns and name not in _FUNCTIONS:
            constants.setdefault(name, float(m.group(2)))

    if not derivatives:
        return _closed_form(text, target, names, columns, constants)

    rhs: dict[str, object] = {}
    times: set[str] = set()
    for (state, variable), expr in derivatives:
        if state in rhs and (not _symbols(expr) or _symbols(rhs[state])):
            continue  # a second mention ("dB/dt = 0 at the peak") never replaces the law itself
        rhs[state] = expr
        times.add(variable)
    if len(times) > 1:
        return Reading(problem=f"the equations differentiate by several variables ({', '.join(sorted(times))})")
    time = times.pop()
    if target not in rhs:
        return Reading(problem=f"the equations give d/d{time} of {', '.join(rhs)} but not of the measured `{target}`")
    states = _needed_states(target, rhs)
    starts: dict[str, object] = {}
    for (state, _var), expr in _equations(_INITIAL, text):
        if state in states and state not in starts:
            starts[state] = expr
    for sentence in re.split(r"(?<=[.;!?])\s+|\n\s*\n", text):  # "starts from pure A, with no B and no C"
        if re.search(r"\b(start\w*|initial\w*|begin\w*|at first|at t\s*=\s*0|at time zero)\b", sentence, re.I):
            for state in re.findall(rf"\bno\s+({_IDENT})\b", sentence):
                if state in states and state not in starts:
                    import sympy
                    starts[state] = sympy.Integer(0)
    for state in states:  # "from a known concentration A0": a column named like the start
        if state not in starts:
            for c in columns:
                if c in (f"{state}0", f"{state}_0", f"{state}(0)", f"{state}_init", f"{state}_initial"):
                    import sympy
                    starts[state] = sympy.Symbol(c)
    time_col = time_column_for(time, columns or [], time_column) if columns or time_column else time_column
    if not time_col:
        return Reading(problem=f"no data column holds the law's time `{time}`"
                               + (f" (columns: {', '.join(columns)})" if columns else ""))
    known = set(names) | set(states) | {time} | set(constants)
    used: set[str] = set()
    for state in states:
        used |= _symbols(rhs[state])
    for expr in starts.values():
        used |= _symbols(expr) - {time}
    row_names = sorted(used - known)
    unexplained = [n for n in row_names if columns and n not in columns]
    if unexplained:
        return Reading(problem=f"the law names {', '.join(unexplained)}, which is neither a parameter asked for "
                               f"({', '.join(names)}), a state, a stated constant nor a data column")
    missing = [n for n in names if not any(n in _symbols(rhs[s]) for s in states)
               and not any(n in _symbols(e) for e in starts.values())]
    if missing:
        return Reading(problem=f"the law that governs `{target}` does not involve {', '.join(missing)}")
    rename = {n: _safe_name(n) for n in used | set(states)}
    law = StatedLaw(names=tuple(names), time=time, time_column=time_col, states=tuple(states), observed=target,
                    rhs={s: _pycode(rhs[s], rename) for s in states},
                    initial={s: _pycode(starts[s], rename) for s in states if s in starts},
                    unknown_initial=tuple(s for s in states if s not in starts),
                    constants={k: v for k, v in constants.items() if k in used}, columns=tuple(row_names))
    return Reading(law=law)


def _needed_states(target: str, rhs: dict[str, object]) -> list[str]:
    """The states the target's equation depends on, transitively, in the order the text gives them."""
    needed, frontier = {target}, [target]
    while frontier:
        for name in _symbols(rhs[frontier.pop()]):
            if name in rhs and name not in needed:
                needed.add(name)
                frontier.append(name)
    return [s for s in rhs if s in needed]


def _closed_form(text: str, target: str, names: list[str], columns: list[str], constants: dict[str, float]) -> Reading:
    pattern = re.compile(rf"(?<![\w'(]){re.escape(target)}\s*(?:\(\s*{_IDENT}\s*\))?\s*=\s*")
    for _groups, expr in _equations(pattern, text):
        used = _symbols(expr)
        if not used & set(names):
            continue
        row_names = sorted(used - set(names) - set(constants))
        unexplained = [n for n in row_names if columns and n not in columns]
        if unexplained:
            return Reading(problem=f"the formula for `{target}` names {', '.join(unexplained)}, which is neither a "
                                   "parameter asked for, a stated constant nor a data column")
        missing = [n for n in names if n not in used]
        if missing:
            return Reading(problem=f"the formula for `{target}` does not involve {', '.join(missing)}")
        rename = {n: _safe_name(n) for n in used}
        return Reading(law=StatedLaw(names=tuple(names), observed=target, value=_pycode(expr, rename),
                                     constants={k: v for k, v in constants.items() if k in used},
                                     columns=tuple(row_names)))
    return Reading()


def start_name(state: str) -> str:
    """The fitted unknown holding a state's start the text does not give."""
    return f"{state}(0)"


def python_source(law: StatedLaw) -> str:
    """The law as the functions a generated program fits: ``stated_initial(row, p)`` and
    ``stated_rhs(t, y, p, row)`` for an ODE, ``stated_value(row, p)`` for a closed form, with
    ``STATED_LAW`` describing the rest (what law_fit.py's program reads)."""
    def unpack(names: list[str], source: str) -> list[str]:
        return [f"    {_safe_name(n)} = {source}[{n!r}]" for n in names]

    constants = [f"    {_safe_name(k)} = {v!r}  # stated by the task" for k, v in sorted(law.constants.items())]
    header = ["# The law the task states in its text, read by the offline scientist:",
              f"#   {law.describe()}",
              "STATED_LAW = " + repr({"time": law.time_column, "state": list(law.states), "observed": law.observed,
                                      "unknown_initial": list(law.unknown_initial)}) + ""]
    if not law.is_ode:
        return "\n".join(header + ["", "", "def stated_value(row, p):",
                                   *unpack(list(law.names), "p"), *unpack(list(law.columns), "row"), *constants,
                                   f"    return {law.value}"])
    rhs_names = sorted({n for n in law.columns if any(re.search(rf"\b{re.escape(_safe_name(n))}\b", law.rhs[s])
                                                      for s in law.states)})
    starts = [law.initial.get(s) or f"p[{start_name(s)!r}]" for s in law.states]
    lines = header + ["", "", "def stated_initial(row, p):", *unpack(list(law.names), "p"),
                      *unpack(list(law.columns), "row"), *constants, f"    return [{', '.join(starts)}]",
                      "", "", f"def stated_rhs({_safe_name(law.time)}, y, p, row):",
                      f"    {', '.join(_safe_name(s) for s in law.states)}{',' if len(law.states) == 1 else ''} = y",
                      *unpack(list(law.names), "p"), *unpack(rhs_names, "row"), *constants,
                      f"    return [{', '.join(law.rhs[s] for s in law.states)}]"]
    return "\n".join(lines)
