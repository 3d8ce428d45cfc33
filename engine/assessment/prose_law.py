"""A law the task states in its prose, read into code (answer kind ``parameters``).

Scientists write the law they want fitted into the task's text as often as into a law file:

    dS/dt = -beta S I / N,   dI/dt = beta S I / N - gamma I,   dR/dt = gamma I
    S(0) = N - I0,  I(0) = I0,  R(0) = 0

or a closed form of the measured quantity (``B = A0 k1 / (k2 - k1) (exp(-k1 t) - exp(-k2 t))``).
This module finds such equations (``dX/dt = ...``, ``d[X]/dt = ...``, ``X' = ...``, starts
``X(0) = ...``, a closed form ``TARGET = ...``, numeric constants ``g = 9.81``), parses each
right-hand side with sympy, and sorts every name into the answer's parameters, the states, the
time, stated constants and data columns. What it returns is plain data (``StatedLaw``) that
``python_source`` turns into the functions a generated program integrates and fits
(engine/offline/law_fit.py).

The text is a person's, perhaps uploaded by a stranger, and sympy's parser evaluates Python. So a
formula reaches it only made of names, numbers, the operators ``+ - * / ^``, parentheses and
commas (a dot only inside a number: no attribute can be reached), every name is bound to a sympy
Symbol (``S``, ``I``, ``N``, ``E``, ``gamma`` are sympy objects otherwise) or to one of a few
functions, nothing is evaluated (``evaluate=False``), and the program's source is printed here
from the parsed tree (sympy's printer evaluates while it sorts terms). A number raised to a
power of a power, or to an exponent beyond ``_MAX_EXPONENT``, is refused: no formula of a law
needs one, and computing it would not end.
"""
from __future__ import annotations

import keyword
import math
import re
import unicodedata
from dataclasses import dataclass, field

# The functions a law may call: the sympy function each name parses to, and its Python spelling.
_FUNCTIONS = {"exp": ("exp", "math.exp"), "log": ("log", "math.log"), "ln": ("log", "math.log"),
              "sqrt": ("sqrt", "math.sqrt"), "sin": ("sin", "math.sin"), "cos": ("cos", "math.cos"),
              "tan": ("tan", "math.tan"), "tanh": ("tanh", "math.tanh"), "sinh": ("sinh", "math.sinh"),
              "cosh": ("cosh", "math.cosh"), "abs": ("Abs", "abs"), "min": ("Min", "min"), "max": ("Max", "max")}
_PYTHON_OF = {sympy_name: python for sympy_name, python in _FUNCTIONS.values()}
# Names that are a mathematical constant unless the task uses them for something else.
_MATH_CONSTANTS = {"pi": "math.pi", "e": "math.e"}
# Words of a time column's name (general cues of how tables name time, not any task's column);
# one-letter words other than t ("s", "h") name too many other things to count.
_TIME_WORDS = ("time", "t", "day", "days", "hour", "hours", "hr", "hrs", "minute", "minutes", "min", "mins",
               "second", "seconds", "sec", "secs", "week", "weeks", "month", "months", "year", "years", "yr",
               "age", "step", "steps")
# Names the generated functions keep for themselves.
_RESERVED = {"math"}
_MAX_PROSE = 50_000        # characters of text searched for a law
_MAX_EXPRESSION = 400      # characters of one right-hand side
_MAX_EQUATIONS = 64        # equations of one form read from a text
_MAX_EXPONENT = 64         # the largest number a law raises to
_IDENT = r"[^\W\d]\w*"
_DERIVATIVE = re.compile(rf"\bd[ \t]*(?:\[[ \t]*)?({_IDENT})[ \t]*\]?[ \t]*/[ \t]*d[ \t]*({_IDENT})"
                         rf"[ \t]*(?:\([ \t]*\w+[ \t]*\))?[ \t]*=[ \t]*")
_PRIME = re.compile(rf"(?<![\w'])({_IDENT})[ \t]*'[ \t]*(?:\([ \t]*({_IDENT})[ \t]*\))?[ \t]*=[ \t]*")
_INITIAL = re.compile(rf"(?<![\w'])({_IDENT})[ \t]*\([ \t]*(?:({_IDENT})[ \t]*=[ \t]*)?0(?:\.0*)?[ \t]*\)[ \t]*=[ \t]*")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_CONSTANT = re.compile(rf"(?<![\w'(])({_IDENT})[ \t]*=[ \t]*({_NUMBER})(?![\w*/^+(-]|\.\d)")
_START_WORDS = re.compile(r"\b(start\w*|initial\w*|begin\w*|at first|at t\s*=\s*0|at time zero)\b", re.I)
_SAFE_TEXT = re.compile(r"^[\w\s+\-*/^(),.]*$")
_NUMERIC_DOT = re.compile(r"(?<![\w.])(?:\d+\.\d*|\.\d+)(?:[eE][-+]?\d+)?")
_OPERATOR = re.compile(r"[-+*/^|=<>]")
_UNICODE_OPERATORS = {"\u2212": "-", "\u2013": "-", "\u00b7": "*", "\u22c5": "*", "\u00d7": "*", "\u2217": "*",
                      "\u00b2": "^2", "\u00b3": "^3"}


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


class _Unreadable(ValueError):
    """A formula this module will not parse or print."""


def _normalise(text: str) -> str:
    for a, b in _UNICODE_OPERATORS.items():
        text = text.replace(a, b)
    # Python reads identifiers in NFKC ("µ" as "μ"); the names bound for sympy must be the same
    return unicodedata.normalize("NFKC", text[:_MAX_PROSE])


def _safe_name(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


def _parse(text: str):
    """A sympy expression of ``text``, unevaluated, or None when it is not a plain formula."""
    import sympy
    from sympy.parsing.sympy_parser import convert_xor, implicit_multiplication, parse_expr, standard_transformations

    text = text.strip().rstrip(",;:")
    text = text[:-1] if text.endswith(".") and not re.search(r"\d\.$", text) else text
    if not text or len(text) > _MAX_EXPRESSION or not _SAFE_TEXT.match(text) or "__" in text:
        return None
    if "." in _NUMERIC_DOT.sub("", text):  # a dot outside a number would reach an attribute
        return None
    names = set(re.findall(_IDENT, text))
    local = {}
    for name in names:
        if name in _FUNCTIONS:
            # unevaluated as written: max() of two huge constants would compare them while parsing,
            # before the bounds below are checked
            function = getattr(sympy, _FUNCTIONS[name][0])
            local[name] = _unevaluated(function) if function in (sympy.Max, sympy.Min) else function
        else:  # every other name, a keyword included ("lambda"), is a symbol of its own name
            local[_safe_name(name)] = sympy.Symbol(_safe_name(name))
    for name in names:
        if keyword.iskeyword(name):
            text = re.sub(rf"\b{name}\b", _safe_name(name), text)
    builtins = {n: getattr(sympy, n) for n in ("Add", "Mul", "Pow", "Integer", "Float", "Rational", "Symbol")}
    try:
        expr = parse_expr(text, local_dict=local, global_dict={"__builtins__": {}, **builtins},
                          transformations=standard_transformations + (implicit_multiplication, convert_xor),
                          evaluate=False)
        if not isinstance(expr, sympy.Expr) or not _bounded_powers(expr):
            return None
        expr = expr.doit()  # bounded now: "0 holds" is 0, "-k A" is -A*k
        _to_python(expr, {})  # refuse here what cannot be printed
    except Exception:  # noqa: BLE001 - any failure to parse means: not a formula
        return None
    return expr


def _unevaluated(function):
    def call(*args):
        return function(*args, evaluate=False)
    return call


def _small(expr) -> bool:
    """A number of a few digits, or sums, products and reciprocals of such: a safe exponent."""
    import sympy

    if isinstance(expr, sympy.Number):
        return abs(float(expr)) <= _MAX_EXPONENT
    if isinstance(expr, sympy.Pow):
        return expr.args[1] == -1 and _small(expr.args[0])
    return isinstance(expr, (sympy.Add, sympy.Mul)) and all(_small(a) for a in expr.args)


def _bounded_powers(expr) -> bool:
    """No power whose value could not be computed: every exponent without a symbol is small, and
    a number is never raised to a power of a power (9^9^9)."""
    import sympy

    for node in sympy.preorder_traversal(expr):
        # exp(exp(exp(64))) is a number with 10^(10^27) digits: max() comparing two of them hung
        # the reader at 100 % CPU. A constant a function grows exponentially in must be small.
        if isinstance(node, (sympy.exp, sympy.sinh, sympy.cosh)) and not node.args[0].free_symbols \
                and not _small(node.args[0]):
            return False
        if isinstance(node, sympy.Pow):
            base, exponent = node.args
            if not exponent.free_symbols and not _small(exponent):
                return False
            if not base.free_symbols and any(isinstance(n, sympy.Pow) and n.args[1] != -1
                                             for n in sympy.preorder_traversal(base)):
                return False
    return True


def _to_python(expr, spelled: dict[str, str]) -> str:
    """Python source of a parsed formula, parenthesised only where Python needs it, as a scientist
    would write it (``spelled``: names printed otherwise, ``e`` as ``math.e``)."""
    return _printed(expr, spelled)[0]


_ATOM, _POWER, _PRODUCT, _SUM = 4, 3, 2, 1  # binding strength of what a printed piece is


def _wrapped(piece: tuple[str, int], at_least: int) -> str:
    text, strength = piece
    return text if strength >= at_least else f"({text})"


def _printed(expr, spelled: dict[str, str]) -> tuple[str, int]:
    import sympy

    if isinstance(expr, sympy.Symbol):
        return spelled.get(expr.name, expr.name), _ATOM
    if isinstance(expr, sympy.Integer):
        return str(int(expr)), _ATOM if expr >= 0 else _PRODUCT
    if isinstance(expr, sympy.Rational):
        return f"{int(expr.p)} / {int(expr.q)}", _PRODUCT
    if isinstance(expr, sympy.Float):
        value = float(expr)
        if not math.isfinite(value):
            raise _Unreadable("a number too large for a float")
        return repr(value), _ATOM if value >= 0 else _PRODUCT
    if expr is sympy.pi:
        return "math.pi", _ATOM
    if isinstance(expr, sympy.Add):
        text = ""
        for i, term in enumerate(expr.args):
            piece = _printed(term, spelled)
            if i and piece[0].startswith("-") and piece[1] >= _PRODUCT:
                text += " - " + piece[0][1:]
            else:
                text += (" + " if i else "") + piece[0]
        return text, _SUM
    if isinstance(expr, sympy.Mul):
        factors = list(expr.args)
        sign = ""
        if factors and factors[0].is_Number and factors[0] < 0:
            sign, factors[0] = "-", -factors[0]
            if factors[0] == 1:
                factors = factors[1:]
        over = [f.args[0] for f in factors if isinstance(f, sympy.Pow) and f.args[1] == -1]
        top = [f for f in factors if not (isinstance(f, sympy.Pow) and f.args[1] == -1)]
        text = "*".join(_wrapped(_printed(f, spelled), _PRODUCT + 1) if len(top) > 1 else
                        _wrapped(_printed(f, spelled), _PRODUCT) for f in top) or "1"
        if over:
            below = [_printed(f, spelled) for f in over]
            text += " / " + (_wrapped(below[0], _POWER) if len(below) == 1 else
                             "(" + "*".join(_wrapped(b, _PRODUCT + 1) for b in below) + ")")
        return sign + text, _PRODUCT
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.args
        if not _bounded_powers(expr):
            raise _Unreadable("a power beyond what a law uses")
        if exponent == -1:
            return "1 / " + _wrapped(_printed(base, spelled), _POWER), _PRODUCT
        return (_wrapped(_printed(base, spelled), _ATOM) + " ** " + _wrapped(_printed(exponent, spelled), _ATOM),
                _POWER)
    if isinstance(expr, sympy.Function) and type(expr).__name__ in _PYTHON_OF:
        return f"{_PYTHON_OF[type(expr).__name__]}({', '.join(_to_python(a, spelled) for a in expr.args)})", _ATOM
    raise _Unreadable(f"{type(expr).__name__} is not part of a law's formula")


def _right_hand_side(text: str):
    """The formula at the start of ``text``: up to the line's end or the next equation, dropping
    trailing words of prose ("... - k2 B (the decay)") until what is left parses. Only prose may
    be dropped: a cut tail with an operator in it means part of the formula was not understood,
    and the whole equation is refused rather than read short."""
    text = re.split(r"[;\n]|,\s+(?=[^,=]*=)|\.\s|\.$|\s{3,}|\s(?:where|with|for|and|in|at|when|if)\s", text)[0]
    words = text.split()
    for cut in range(len(words), max(0, len(words) - 8), -1):
        if _OPERATOR.search(" ".join(words[cut:])):
            return None
        expr = _parse(" ".join(words[:cut]))
        if expr is not None:
            return expr
    return None


def _equations(pattern: re.Pattern, text: str, unreadable: list[str] | None = None
               ) -> list[tuple[tuple[str, ...], object]]:
    """(groups, formula) of each equation ``pattern`` finds; what it cannot read goes to ``unreadable``."""
    out = []
    for n, m in enumerate(pattern.finditer(text)):
        if n == _MAX_EQUATIONS:  # a law has a handful; a text with thousands is not stating one
            break
        expr = _right_hand_side(text[m.end():])
        if expr is not None:
            out.append((tuple(g for g in m.groups()), expr))
        elif unreadable is not None:
            unreadable.append((m.group(0) + text[m.end():].split("\n")[0])[:80].strip())
    return out


def _symbols(expr) -> set[str]:
    return {str(s) for s in expr.free_symbols}


def time_column_for(variable: str, columns: list[str], stated: str = "") -> str:
    """The data column holding the law's time: the one the task names, else the one named like the
    variable (``t``, ``t_min``), else the one whose name is a word for time (``day``, ``hours``)."""
    if stated:
        return stated if stated in columns else ""
    lowered = {c: c.lower() for c in columns}
    for test in (lambda low: low == variable.lower(), lambda low: low.startswith(variable.lower() + "_"),
                 lambda low: low in _TIME_WORDS, lambda low: re.split(r"[_\s(\[]", low)[0] in _TIME_WORDS):
        for c, low in lowered.items():
            if test(low):
                return c
    return ""


def _time_variables(text: str) -> set[str]:
    return {m.group(2) for m in _DERIVATIVE.finditer(text)} | {m.group(2) for m in _PRIME.finditer(text) if m.group(2)}


def _strip_time_arguments(text: str, times: set[str]) -> str:
    """``N(t)`` is N at time t, not N times t: drop the argument after a name that is no function."""
    for var in times:
        text = re.sub(rf"(?<![\w'])({_IDENT})[ \t]*\([ \t]*{re.escape(var)}[ \t]*\)",
                      lambda m: m.group(0) if m.group(1) in _FUNCTIONS else m.group(1), text)
    return text


def read_law(prose: str, *, target: str, names: list[str] | tuple[str, ...], columns: list[str] | tuple[str, ...],
             time_column: str = "") -> Reading:
    """The law ``prose`` states for ``target`` with the unknowns ``names``, given the data's
    ``columns`` (features; empty: not known, every other name is then taken for a column)."""
    names = list(names)
    # names a formula can hold are identifiers; anything else (from a user's config) never reaches
    # the program's source, where it would be code
    odd = [n for n in [*names, target] if not (isinstance(n, str) and n.isidentifier() and not n.startswith("_"))
           or n in _RESERVED]
    if odd:
        return Reading(problem=f"{', '.join(map(repr, odd))} cannot appear in a formula (not a plain name)")
    all_columns = [c for c in columns if c != target]
    columns = [c for c in all_columns if isinstance(c, str) and c.isidentifier() and c not in _RESERVED]
    text = _normalise(prose)
    times = _time_variables(text)
    text = _strip_time_arguments(text, times)
    unreadable: list[str] = []
    derivatives = (_equations(_DERIVATIVE, text, unreadable)
                   + [((m[0], m[1] or "t"), e) for m, e in _equations(_PRIME, text, unreadable)])
    if unreadable:  # part of the law not understood: never fit the rest as if it were all
        return Reading(problem=f"cannot read the formula in {unreadable[0]!r}")

    if not derivatives:
        return _closed_form(text, target, names, columns, _constants(text, set(names) | {target} | set(columns)))

    rhs: dict[str, object] = {}
    variable_of: dict[str, str] = {}
    for (state, variable), expr in derivatives:
        state = _safe_name(state)
        if state in rhs:
            if not _symbols(expr) or str(expr) == str(rhs[state]):
                continue  # "dB/dt = 0 at the peak", or the law said twice
            if _symbols(rhs[state]):
                return Reading(problem=f"the text gives two different equations for d{state}/d{variable}: "
                                       f"{_to_python(rhs[state], {})} and {_to_python(expr, {})}")
        rhs[state] = expr
        variable_of[state] = variable
    if len(set(variable_of.values())) > 1:
        return Reading(problem=f"the equations differentiate by several variables "
                               f"({', '.join(sorted(set(variable_of.values())))})")
    time = next(iter(variable_of.values()))
    if target not in rhs:
        return Reading(problem=f"the equations give d/d{time} of {', '.join(rhs)} but not of the measured `{target}`")
    states = _needed_states(target, rhs)
    constants = _constants(text, set(names) | {target} | set(columns) | set(rhs) | {time})
    starts = _starts(text, states, columns)
    time_col = time_column_for(time, all_columns, time_column) if all_columns or time_column else time_column
    if not time_col:
        return Reading(problem=f"no data column holds the law's time `{time}`"
                               + (f" (columns: {', '.join(all_columns)})" if all_columns else ""))
    known = {_safe_name(n) for n in names} | set(states) | {time} | set(constants)
    used: set[str] = set()
    for state in states:
        used |= _symbols(rhs[state])
    for expr in starts.values():
        used |= _symbols(expr) - {time}
    row_names = sorted(n for n in used - known if not (n in _MATH_CONSTANTS and n not in columns))
    unexplained = [n for n in row_names if (columns and n not in columns) or n in _RESERVED or n.startswith("_")]
    if unexplained:
        return Reading(problem=f"the law names {', '.join(unexplained)}, which is neither a parameter asked for "
                               f"({', '.join(names)}), a state, a stated constant nor a data column")
    missing = [n for n in names if not any(_safe_name(n) in _symbols(rhs[s]) for s in states)
               and not any(_safe_name(n) in _symbols(e) for e in starts.values())]
    if missing:
        return Reading(problem=f"the law that governs `{target}` does not involve {', '.join(missing)}")
    spelled = {n: v for n, v in _MATH_CONSTANTS.items() if n not in known and n not in columns}
    try:
        law = StatedLaw(names=tuple(names), time=time, time_column=time_col, states=tuple(states), observed=target,
                        rhs={s: _to_python(rhs[s], spelled) for s in states},
                        initial={s: _to_python(starts[s], spelled) for s in states if s in starts},
                        unknown_initial=tuple(s for s in states if s not in starts),
                        constants={k: v for k, v in constants.items() if k in used}, columns=tuple(row_names))
    except _Unreadable as exc:
        return Reading(problem=f"the law holds {exc}")
    return Reading(law=law)


def _constants(text: str, taken: set[str]) -> dict[str, float]:
    """Numbers the text states for a name (``g = 9.81``), never for a name that is something else."""
    out: dict[str, float] = {}
    for m in _CONSTANT.finditer(text):
        name, value = _safe_name(m.group(1)), float(m.group(2))
        if name not in taken and name not in _FUNCTIONS and name not in _RESERVED and math.isfinite(value):
            out.setdefault(name, value)
    return out


def _starts(text: str, states: list[str], columns: list[str]) -> dict[str, object]:
    """Each state's start: ``X(0) = ...``; in a sentence saying how a run starts, "X = 1.0" or
    "with no X"; else a column named like a start (``X0``)."""
    import sympy

    starts: dict[str, object] = {}
    for (state, _var), expr in _equations(_INITIAL, text):
        if state in states and state not in starts:
            starts[state] = expr
    for sentence in re.split(r"(?<=[.;!?])\s+|\n\s*\n", text):
        if not _START_WORDS.search(sentence):
            continue
        for state in re.findall(rf"\bno\s+({_IDENT})\b", sentence):
            if state in states and state not in starts:
                starts[state] = sympy.Integer(0)
        for m in _CONSTANT.finditer(sentence):
            if m.group(1) in states and m.group(1) not in starts:
                starts[m.group(1)] = sympy.Float(float(m.group(2)))
    for state in states:
        if state not in starts:
            for c in columns:
                if c in (f"{state}0", f"{state}_0", f"{state}_init", f"{state}_initial", f"{state}_start"):
                    starts[state] = sympy.Symbol(c)
    return starts


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
    pattern = re.compile(rf"(?<![\w'(]){re.escape(target)}[ \t]*(?:\([ \t]*{_IDENT}[ \t]*\))?[ \t]*=[ \t]*")
    for _groups, expr in _equations(pattern, text):
        used = _symbols(expr)
        if not used & {_safe_name(n) for n in names}:
            continue
        known = {_safe_name(n) for n in names} | set(constants)
        row_names = sorted(n for n in used - known if not (n in _MATH_CONSTANTS and n not in columns))
        unexplained = [n for n in row_names if (columns and n not in columns) or n in _RESERVED or n.startswith("_")]
        if unexplained:
            return Reading(problem=f"the formula for `{target}` names {', '.join(unexplained)}, which is neither a "
                                   "parameter asked for, a stated constant nor a data column")
        missing = [n for n in names if _safe_name(n) not in used]
        if missing:
            return Reading(problem=f"the formula for `{target}` does not involve {', '.join(missing)}")
        spelled = {n: v for n, v in _MATH_CONSTANTS.items() if n not in known and n not in columns}
        try:
            value = _to_python(expr, spelled)
        except _Unreadable as exc:
            return Reading(problem=f"the formula for `{target}` holds {exc}")
        return Reading(law=StatedLaw(names=tuple(names), observed=target, value=value,
                                     constants={k: v for k, v in constants.items() if k in used},
                                     columns=tuple(row_names)))
    return Reading()


def start_name(state: str) -> str:
    """The fitted unknown holding a state's start the text does not give."""
    return f"{state}(0)"


def python_source(law: StatedLaw) -> str:
    """The law as the functions a generated program fits: ``stated_initial(_row, _p)`` and
    ``stated_rhs(_t, _y, _p, _row)`` for an ODE, ``stated_value(_row, _p)`` for a closed form, with
    ``STATED_LAW`` describing the rest (what law_fit.py's program reads). The functions' own
    names start with an underscore, which no name of a law does, so none is shadowed."""
    def unpack(names: list[str], source: str) -> list[str]:
        return [f"    {_safe_name(n)} = {source}[{n!r}]" for n in names]

    constants = [f"    {_safe_name(k)} = {v!r}  # stated by the task" for k, v in sorted(law.constants.items())]
    header = ["# The law the task states in its text, read by the offline scientist:",
              f"#   {law.describe()}",
              "STATED_LAW = " + repr({"time": law.time_column, "state": list(law.states), "observed": law.observed,
                                      "unknown_initial": list(law.unknown_initial)})]
    if not law.is_ode:
        return "\n".join(header + ["", "", "def stated_value(_row, _p):",
                                   *unpack(list(law.names), "_p"), *unpack(list(law.columns), "_row"), *constants,
                                   f"    return {law.value}"])
    rhs_names = sorted({n for n in law.columns if any(re.search(rf"\b{re.escape(_safe_name(n))}\b", law.rhs[s])
                                                      for s in law.states)})
    starts = [law.initial.get(s) or f"_p[{start_name(s)!r}]" for s in law.states]
    lines = header + ["", "", "def stated_initial(_row, _p):", *unpack(list(law.names), "_p"),
                      *unpack(list(law.columns), "_row"), *constants, f"    return [{', '.join(starts)}]",
                      "", "", "def stated_rhs(_t, _y, _p, _row):",
                      f"    {_safe_name(law.time)} = _t",
                      f"    {', '.join(_safe_name(s) for s in law.states)}{',' if len(law.states) == 1 else ''} = _y",
                      *unpack(list(law.names), "_p"), *unpack(rhs_names, "_row"), *constants,
                      f"    return [{', '.join(law.rhs[s] for s in law.states)}]"]
    return "\n".join(lines)
