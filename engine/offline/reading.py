"""What the offline scientist understands of a prompt: the facts a scientist would take from the
task description (Goal, Context, Constraints, Resources, Evaluation), the data analysis and the
agent's instructions, reduced to a few normalised values.

Two prompts that say the same thing in other words (another title, a rephrased goal, extra
blank lines, the task in another folder) give the same TaskFacts, and choices are seeded from
TaskFacts.canonical(), never from the prompt's wording. The rules are general cues of the
language scientists write tasks in, not words of any one task.
"""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field, fields

from ..assessment import ANSWER_KINDS
from ..assessment.parameters import ParametersAssessment
from ..prompt_format import (FEATURE_COLUMNS, IN_LOOP_VALIDATION, INSTRUCTIONS, KNOWN_CONSTRAINTS, LESSONS, PROCEDURE,
                             TARGET_COLUMN, inputs, named, read_predictions_line, resource_name, resource_names,
                             resource_value, section, task_sections)
from ..task_kind import (CLASSIFICATION, CLASSIFICATION_METRICS, REGRESSION, REGRESSION_METRICS,  # noqa: F401
                         metric_kind)
from ..assessment.prose_law import python_source, read_law

# Cues in the task's prose. Each is a regex on lower-cased text; a cue preceded closely by a
# negation ("no", "not", "without", ...) in the same sentence does not count.
_CLASS_WORDS = r"\b(classif\w*|labels?|labell?ed|class(es)?|categor(y|ies|ical)|binary outcome)\b"
_REGRESSION_WORDS = r"\b(regress\w*|continuous (value|target|quantity|variable)|quantitative|real[- ]valued)\b"
_EXTRAPOLATE = (r"\b(extrapolat\w*|forecast\w*|"
                r"(beyond|outside( of)?|past|above|below) the (training|observed|measured|sampled|fitted|known|seen)"
                r" ?(data|range|domain|interval|inputs|values|region)?|"
                r"(beyond|outside( of)?) the (range|domain|interval|region) (of|covered|seen|spanned)|"
                r"(larger|higher|greater|smaller|lower|longer) than (any|all|every) (seen|observed|measured|training)|"
                r"(unseen|unobserved|new) (range|regime|region)s?)\b")
_PHYSICS = (r"\b(physic\w*|physical (law|model|principle)s?|known law|governing equation\w*|first principles|"
            r"conservation (law|of)|dimensionless|dimensional analysis|power law|scaling law|"
            r"functional form|closed[- ]form|mechanistic|law of)\b")
_MONOTONE = (r"\b(monoton\w*|non-?decreasing|non-?increasing|(increases|decreases|grows|rises|falls) "
             r"(steadily |strictly )?(with|as))\b")
_POSITIVE = (r"(\b(strictly positive|non-?negative|always positive|(is|are|must be|remains?|stays?) positive|"
             r"positive (quantit\w+|values?|targets?|numbers?|by nature)|never negative|cannot be negative|"
             r"greater than zero|above zero)\b|\b[a-z_]\w* ?>=? ?0(\.0*)?(?![\w.]))")
_DISCONTINUITY = (r"\b(discontinu\w*|jumps?|step change|abrupt (change|jump|shift)|breakpoints?|"
                  r"change ?points?|piecewise)\b")
# A neural network named where the task says it may (or must) be used: a deep-learning framework
# costs minutes of CPU per run, so a program imports one only where the task opts in. A sentence
# that names one without a permission ("networks smear the jump") or with any negation ("neural
# networks are not allowed") opts nothing in.
_NEURAL = r"\b(neural ?(network|net)s?|pytorch|torch|deep learning|deep neural)\b"
_PERMISSION = (r"\b(allowed|permitted|welcome|encouraged|required|recommended|may be (used|trained)|"
               r"can be (used|trained)|use|using|train)\b")
_NEGATION = re.compile(r"\b(no|not|none|never|without|cannot|isn't|doesn't|don't|neither)\b")
_NEGATION_WINDOW = 4  # words before a cue that may negate it

# Words a scientist uses for an approach, mapped to the strategy library's tags: what agent
# instructions, lessons and procedures ask for (by stem, so "trees"/"tree-based" both count).
TAG_WORDS: dict[str, str] = {
    "discontinu": "discontinuity", "jump": "discontinuity", "piecewise": "piecewise", "smooth": "smooth",
    "nonparametric": "nonparametric", "non-parametric": "nonparametric", "local": "nonparametric",
    "neural": "neural", "network": "neural", "mlp": "neural", "ensemble": "ensemble", "stack": "ensemble",
    "tree": "trees", "forest": "trees", "boost": "trees", "linear": "linear", "regularis": "regularised",
    "regulariz": "regularised", "ridge": "regularised", "lasso": "regularised", "scal": "scaling",
    "standardis": "scaling", "standardiz": "scaling", "normalis": "scaling", "normaliz": "scaling",
    "kernel": "kernel", "baseline": "baseline", "interpretab": "interpretable", "fast": "fast",
    "parametric": "parametric", "extrapolat": "extrapolation", "physic": "physics", "law": "physics",
    "dimensionless": "physics", "formula": "parametric", "symbolic": "symbolic",
    "classif": "classifier", "logistic": "linear", "neighbo": "nonparametric",
}


@dataclass(frozen=True, kw_only=True)
class AnswerFacts:
    """What a task's answer kind adds to the facts, written once: the scientist reads them from a
    prompt (``TaskFacts``) and renders programs for them (``DataSpec``, engine/offline/strategy.py)."""

    # The target's declared physical bounds (low, high; None: none): a rule every program
    # honours by clipping onto it, not a reason to choose differently, so not in canonical().
    bounds: tuple[float | None, float | None] = (None, None)
    # A forecast of several series: the column naming them, the one ordering their steps and
    # the steps asked per series (the task's "answer:" line); "" / 0 otherwise.
    series_column: str = ""
    time_column: str = ""
    horizon: int = 0
    # A table of parameters: their names, the reproduction file and the law file (the task's
    # "answer:" lines); empty otherwise.
    parameter_names: tuple[str, ...] = ()
    reproduction_file: str = ""
    law_path: str = ""
    # Without a law file: each parameter's range (name, low, high), the law the task's text states
    # as the program's source (engine/assessment/prose_law.py), or why the equations it has cannot be used.
    parameter_ranges: tuple[tuple[str, float, float], ...] = ()
    stated_law: str = ""
    stated_law_problem: str = ""
    # A field on a grid: the query points and the observations (the task's "answer:" lines).
    query_path: str = ""
    observations_path: str = ""


ANSWER_FACTS = tuple(f.name for f in fields(AnswerFacts))


def answer_facts(facts: AnswerFacts) -> dict:
    """The answer kind's facts of ``facts``, to hand to another holder of them."""
    return {name: getattr(facts, name) for name in ANSWER_FACTS}


@dataclass(frozen=True)
class TaskFacts(AnswerFacts):
    """Normalised facts of a prompt; ``evidence`` says which cue set each one (for people)."""

    kind: str = REGRESSION               # regression | classification
    n_features: int = 0                   # 0: not stated
    target_type: str = "float"            # the prediction contract's type for the target column
    metric: str = ""
    higher_is_better: bool | None = None
    extrapolate: bool = False             # scored on inputs outside the training range
    physics: bool = False                 # known physics / a functional form is welcome
    monotone: bool = False
    positive: bool = False                # the target is positive by nature
    discontinuity: bool = False           # the text or the data report says the target jumps
    n_classes: int | None = None          # distinct target values, when the report counts them
    group_column: str = ""                # rows come in groups and new groups are scored: validate by group
    asked: frozenset[str] = frozenset()   # library tags the agent's instructions ask for
    # The only libraries the task allows ("use only numpy, scipy, ..."); empty: no such rule.
    # A filter on strategies, not a reason to choose differently, so not part of canonical().
    libraries: frozenset[str] = frozenset()
    # The task allows or asks for a neural network (PyTorch): a permission, like libraries, so
    # not part of canonical() either (a task that says nothing of networks keeps its choices).
    neural: bool = False
    evidence: tuple[str, ...] = field(default=(), compare=False)

    @property
    def family(self) -> str:
        if self.kind == CLASSIFICATION:
            return "classification"
        if self.series_column:
            return "forecast"
        if self.parameter_names:
            return "parameters"
        if self.query_path:
            return "field"
        return "regression_1d" if self.n_features == 1 else "tabular_regression"

    def desired_tags(self) -> set[str]:
        """Strategy traits these facts call for."""
        tags: set[str] = set()
        if self.extrapolate:  # a closed form, fitted or searched, carries beyond the data
            tags |= {"extrapolation", "parametric", "symbolic"}
        if self.physics:
            tags |= {"physics", "parametric", "symbolic"}
        if self.monotone:  # a monotone response is what a law with few parameters describes
            tags.add("parametric")
        if self.discontinuity:
            tags |= {"discontinuity", "piecewise"}
        if self.neural:  # a task that opts into networks has a use for one in mind
            tags.add("neural")
        return tags

    def allows(self, packages: tuple[str, ...] | frozenset[str]) -> bool:
        """Whether a program may import these distributions (beyond the scientific stack)."""
        names = {normalise_library(p) for p in packages}
        if names & OPT_IN_LIBRARIES and not self.neural:
            return False
        return not self.libraries or names <= self.libraries

    def canonical(self) -> str:
        """The facts as one stable string (no evidence wording): what choices are seeded from."""
        data = {k: v for k, v in vars(self).items() if k not in {"evidence", "libraries", "neural", "bounds"}}
        for key in (name for name in ANSWER_FACTS if name != "bounds"):
            # an answer kind's facts; absent, no change to the seed
            if not data[key]:
                del data[key]
        data["asked"] = sorted(self.asked)
        return json.dumps(data, sort_keys=True)

    def summary(self) -> str:
        """One line a planner can state: what it read."""
        parts = [self.kind, f"{self.n_features} feature(s)" if self.n_features else "features not stated"]
        if self.metric:
            parts.append(f"metric {self.metric}")
        parts += [name for name, on in (("must extrapolate", self.extrapolate), ("physics welcome", self.physics),
                                        ("monotone", self.monotone), ("positive target", self.positive),
                                        ("discontinuous", self.discontinuity),
                                        ("neural network allowed", self.neural)) if on]
        return ", ".join(parts)


# --- cues ----------------------------------------------------------------------------------------
def mentions(text: str, pattern: str) -> bool:
    """Whether ``text`` states the cue: some match not negated within a few words before it
    in the same sentence."""
    lowered = text.lower()
    for sentence in re.split(r"(?<=[.;!?])\s+|\n", lowered):
        for m in re.finditer(pattern, sentence):
            before = sentence[:m.start()].split()[-_NEGATION_WINDOW:]
            if not any(_NEGATION.fullmatch(w.strip(",:()")) for w in before):
                return True
    return False


def permits_network(text: str) -> bool:
    """Whether some sentence of ``text`` says a neural network may or must be used: it names one
    (or PyTorch) with a word of permission and no negation anywhere in it."""
    for sentence in re.split(r"(?<=[.;!?])\s+|\n", text.lower()):
        if (re.search(_NEURAL, sentence) and re.search(_PERMISSION, sentence)
                and not any(_NEGATION.fullmatch(w.strip(",:()")) for w in sentence.split())):
            return True
    return False


def tags_asked(text: str) -> frozenset[str]:
    found = set()
    for word in re.findall(r"[a-z][a-z-]+", text.lower()):
        for stem, tag in TAG_WORDS.items():
            if word.startswith(stem):
                found.add(tag)
    return frozenset(found)


# "Use only Python with numpy, scipy, pandas and scikit-learn", "only X and Y may be used".
_ONLY_LIBRARIES = re.compile(r"\b(?:use|using|uses|with|import) only\b([^.;\n]*)|"
                            r"\bonly ([^.;\n]*?) (?:may|can|are to) be (?:used|imported)\b")
_NOT_A_LIBRARY = frozenset({"python", "with", "and", "or", "the", "its", "standard", "library", "libraries", "packages",
                            "package", "modules", "stack", "plus", "scientific", "no", "other", "dependencies", "of"})
_KNOWN_LIBRARIES = frozenset({"numpy", "scipy", "pandas", "scikit-learn", "statsmodels", "torch", "pytorch",
                               "tensorflow", "jax", "xgboost", "lightgbm", "catboost", "sympy", "pyoperon", "gplearn"})
_LIBRARY_ALIASES = {"sklearn": "scikit-learn", "pytorch": "torch"}
# Libraries a program may import only where the task opts in (a network allowed, or the library
# named in its closed list), never merely because the task lists no libraries at all.
OPT_IN_LIBRARIES = frozenset({"torch"})


def normalise_library(name: str) -> str:
    name = name.strip().lower().replace("_", "-")
    return _LIBRARY_ALIASES.get(name, name)


def libraries_allowed(text: str) -> frozenset[str]:
    """The closed list of libraries a task allows, when it states one; else empty."""
    found: set[str] = set()
    for m in _ONLY_LIBRARIES.finditer(text.lower()):
        clause = m.group(1) or m.group(2) or ""
        words = {normalise_library(w) for w in re.findall(r"[a-z][a-z0-9_.-]*[a-z0-9]", clause)} - _NOT_A_LIBRARY
        if words & _KNOWN_LIBRARIES:  # "use only the length as input" names no library
            found |= words
    return frozenset(found)


def _metric(evaluation: str) -> tuple[str, bool | None]:
    m = re.search(r"metric `([^`]+)`,\s*(higher|lower) is better", evaluation)
    if m:
        return m.group(1).lower(), m.group(2) == "higher"
    m = re.search(r"^\s*name:\s*([A-Za-z0-9_\-]+)", evaluation, re.M)
    return (m.group(1).lower(), None) if m else ("", None)


def contract_types(resources: str) -> dict[str, str]:
    """column -> type of the prediction contract, ``csv[id:int, y:float]``."""
    m = re.fullmatch(r"csv\[([^\]]*)\]", read_predictions_line(resources)[1])
    return dict(re.findall(r"([^\s,:]+):(\w+)", m.group(1))) if m else {}


def report_text(user: str) -> str:
    """The data analysis a prompt carries, whole (its own ``## `` headings included)."""
    given = inputs(user)
    return "\n".join(given.get(name, "") for name in ("report", "data_findings", "parent_report"))


# --- reading ----------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=128)
def read_facts(system: str, user: str) -> TaskFacts:
    """The facts of one prompt (system: the agent's instructions; user: task, inputs). Kept for
    the same prompt asked again (many agents of one role read the same one): TaskFacts is frozen."""
    parts = task_sections(user)
    prose = "\n".join(parts[k] for k in ("Goal", "Context", "Constraints"))
    evaluation, resources = parts["Evaluation"], parts["Resources"]
    report = report_text(user)
    evidence: list[str] = []

    target = resource_name(resources, TARGET_COLUMN)
    features = resource_names(resources, FEATURE_COLUMNS)
    n_features = len(features) or _report_feature_count(report)
    target_type = contract_types(resources).get(target, "float") if target else "float"
    metric, higher = _metric(evaluation)
    n_classes = _report_classes(report)

    kind = _kind(resources, metric, target_type, prose + "\n" + evaluation, n_classes, evidence)
    validation = resource_value(resources, IN_LOOP_VALIDATION)
    constraints = resource_value(resources, KNOWN_CONSTRAINTS)
    extrapolate = _fact("must extrapolate", _EXTRAPOLATE, prose + "\n" + evaluation, evidence)
    if not extrapolate and re.match(r"(holdout_range|time)\b|.*\bextrapolat", validation):
        extrapolate = True
        evidence.append("must extrapolate: the task's validation holds out the far end of an input")
    if not extrapolate and mentions(report, r"\boutside the training range\b"):
        extrapolate = True
        evidence.append("must extrapolate: the data report finds test inputs outside the training range")
    group = re.match(r"group\b.*?`([^`]+)`", validation)
    physics = _fact("physics welcome", _PHYSICS, prose, evidence)
    monotone = (_fact("monotone", _MONOTONE, prose, evidence)
                or _fact("monotone", r"\b(increasing|decreasing) in\b", constraints, evidence, "the task's constraints")
                or _fact("monotone", r"\bthe target is monotone in\b", report, evidence, "the data report"))
    lower, upper = _bound(constraints, ">"), _bound(constraints, "<")
    positive = _fact("positive target", _POSITIVE, prose, evidence)
    if not positive and lower is not None and lower >= 0:
        positive = True
        evidence.append(f"positive target: the task's constraints bound it below by {lower:g}")
    positive = positive or _fact("positive target", r"\ball target values are positive\b", report, evidence,
                                 "the data report")
    # A jump only when the text or the report says so; a gap in the sampling is not one.
    discontinuity = _fact("discontinuous", _DISCONTINUITY, prose, evidence)
    if not discontinuity and mentions(report, r"\b(discontinuity|jump) (detected|found|evident)\b|"
                                              r"\bevidence of a (discontinuity|jump)\b"):
        discontinuity = True
        evidence.append("discontinuous: the data report finds a jump")

    libraries = libraries_allowed(parts["Constraints"] + "\n" + prose)
    if libraries:
        evidence.append(f"libraries: only {', '.join(sorted(libraries))} (stated by the task's constraints)")
    neural = "torch" in libraries or permits_network(prose)
    if neural:
        evidence.append("neural network allowed: " + ("the task's library list names PyTorch" if "torch" in libraries
                                                      else "stated by the task text"))

    # the answer kind's own lines, read by the kind that writes them (one kind's per task)
    answer: dict = {}
    for kind_class in ANSWER_KINDS.values():
        answer.update(kind_class.read_deliverable(resources))
    if answer.get("horizon"):
        evidence.append(f"forecast: {answer['horizon']} step(s) of each series in `{answer['series_column']}` "
                        "(the task's answer)")
    if answer.get("query_path"):
        evidence.append(f"field: the answer at every point of {answer['query_path']} (the task's answer)")
    names = answer.get("parameter_names", ())
    stated, stated_problem = "", ""
    if names:
        if not answer.get("law_path"):
            stated, stated_problem = _prose_law(prose, resources, names, evidence)
        evidence.append(f"parameters: {named(*names)} (the task's answer)"
                        + (f", the law stated in {answer['law_path']}" if answer.get("law_path") else ""))
    instructions = " ".join(section(system, h) for h in (INSTRUCTIONS, LESSONS, PROCEDURE))
    return TaskFacts(kind=kind, n_features=n_features, target_type=target_type, metric=metric,
                     higher_is_better=higher, extrapolate=extrapolate, physics=physics, monotone=monotone,
                     positive=positive, discontinuity=discontinuity,
                     n_classes=n_classes if kind == CLASSIFICATION else None,
                     group_column=group.group(1) if group else "",
                     asked=tags_asked(instructions), libraries=libraries, neural=neural, bounds=(lower, upper),
                     stated_law=stated, stated_law_problem=stated_problem, evidence=tuple(evidence), **answer)


def _prose_law(prose: str, resources: str, names: tuple[str, ...], evidence: list[str]) -> tuple[str, str]:
    """The law the task's text states, as program source, or why its equations cannot be used."""
    target = resource_name(resources, TARGET_COLUMN)
    columns = resource_names(resources, FEATURE_COLUMNS)
    time = ParametersAssessment.law_time_column(resources)
    reading = read_law(prose, target=target, names=names, columns=columns, time_column=time)
    if reading.law:
        evidence.append(f"law stated in the text: {reading.law.describe()}")
        return python_source(reading.law), ""
    if reading.problem:
        evidence.append(f"the text's equations cannot be fitted: {reading.problem}")
    return "", reading.problem or "no equation for the target found in the text"


def _bound(constraints: str, sign: str) -> float | None:
    """The number after the first ``>=`` (sign ">", a lower bound) or ``<=`` ("<", an upper one)."""
    m = re.search(rf"{sign}=?\s*([-+]?\d[\d.eE+-]*)", constraints)
    try:
        return float(m.group(1)) if m else None
    except ValueError:
        return None


def _fact(name: str, pattern: str, text: str, evidence: list[str], source: str = "the task text") -> bool:
    if mentions(text, pattern):
        evidence.append(f"{name}: stated by {source}")
        return True
    return False


def _kind(resources: str, metric: str, target_type: str, text: str, n_classes: int | None,
          evidence: list[str]) -> str:
    declared = re.search(r"^- (?:task )?kind: `?(regression|classification)`?", resources, re.M)
    if declared:
        evidence.append(f"{declared.group(1)}: declared by the task")
        return declared.group(1)
    by_metric = metric_kind(metric)
    if by_metric:
        evidence.append(f"{by_metric}: the metric is {metric}")
        return by_metric
    if target_type in {"str", "bool"}:
        evidence.append(f"classification: the prediction contract asks for {target_type} labels")
        return CLASSIFICATION
    votes = (int(mentions(text, _CLASS_WORDS)) - int(mentions(text, _REGRESSION_WORDS))
             + int(target_type == "int") + int(n_classes is not None and n_classes <= 20))
    if votes > 0:
        evidence.append("classification: the text speaks of classes or labels"
                        + (" and the contract asks for integers" if target_type == "int" else ""))
        return CLASSIFICATION
    return REGRESSION


def _report_feature_count(report: str) -> int:
    m = re.search(r"\bfeatures: (\d+)\b", report)
    return int(m.group(1)) if m else 0


def _report_classes(report: str) -> int | None:
    m = re.search(r"target[^\n]*?\b(\d+) distinct values\b", report)
    return int(m.group(1)) if m else None
