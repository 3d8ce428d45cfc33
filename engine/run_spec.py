"""What a search run is asked to do, in one typed value: ``RunSpec``.

``evolve()`` takes one; ``manage.py evolve`` derives its options from the fields (``add_arguments``,
``from_options``) and a studio run reads its row into one (``webapp.runs.models.Run.spec``). One
option is one field here: its flag, default, bounds and help are the field's, and where else it is
surfaced (the studio's run form, the Run row) is said beside it (``SURFACES``; a test lists them).
What a run is given rather than asked (where it writes, who decides, what it reports to) stays
an argument of ``evolve``.
"""
from __future__ import annotations

import argparse
from dataclasses import MISSING, dataclass, field, fields

from .budget import Budget
from .limits import MAX_CALLS, MAX_COST_USD, MAX_ITERATIONS, MAX_SEED, MAX_TOKENS, bounded
from .models import ModelSettings
from .sandbox.select import EXECUTOR_KINDS
from .search.registry import DEFAULT, NEEDS_MEMORY, SEARCHES, TAKES_MEMORY


_SAME = object()


def _option(flag: str | None, help: str, *, bounds: tuple[float, float] | None = None,
            choices: tuple[str, ...] | None = None, metavar: str | None = None, switch: str | None = None,
            flag_default: object = _SAME) -> dict:
    """A field's command-line option: ``flag`` (None: not an option of its own), its help, the
    bounds of a number, the choices of a name; ``switch``: a boolean's flag that sets the field to
    the opposite of its default (``--no-single-agent``); ``flag_default``: what the command line
    asks for when the option is not given, where that differs from a library call's default."""
    return {"flag": flag, "help": help, "bounds": bounds, "choices": choices, "metavar": metavar, "switch": switch,
            "flag_default": flag_default}


@dataclass(frozen=True)
class RunSpec:
    search: str = field(default=DEFAULT, metadata=_option(
        "--search", "the search procedure", choices=SEARCHES))
    iterations: int = field(default=5, metadata=_option(
        "--iterations", "iterations (or rounds) of the search", bounds=(1, MAX_ITERATIONS)))
    seed: int = field(default=0, metadata=_option("--seed", "the seed of every random choice", bounds=(0, MAX_SEED)))
    max_tokens: int = field(default=2_000_000, metadata=_option(
        "--max-tokens", f"token budget of the whole run, every probe of a search included (at most {MAX_TOKENS:,})", bounds=(1, MAX_TOKENS)))
    max_cost_usd: float | None = field(default=None, metadata=_option(
        "--max-cost", "spending cap of the whole run in USD (priced models only)", bounds=(0.0001, MAX_COST_USD)))
    max_calls: int | None = field(default=None, metadata=_option(
        "--max-calls", "model calls the whole run may make", bounds=(1, MAX_CALLS)))
    model: str | None = field(default=None, metadata=_option(
        None, "one model for every role (the model options' --model)"))
    models: ModelSettings | None = field(default=None, metadata=_option(
        None, "each role's endpoint (the model options: --model, --model-ROLE, --api-base, ...)"))
    start: str | None = field(default=None, metadata=_option(
        "--start", "the starting workflow: the fixed team, one synthesized from the library (its stages "
        "traced in synthesis.jsonl), the archive's nearest (else synthesized), or a workflow file (Trellis JSON, "
        "an AFlow operator graph, a LangGraph graph); default: the search's own", metavar="team|synthesized|archive|FILE"))
    warm_start: bool | None = field(default=None, metadata=_option(
        "--warm-start", "start SciMARS from the archive's most similar workflow (other searches always do unless "
        "--no-archive)", switch="--warm-start"))
    single_agent: bool = field(default=True, metadata=_option(
        "--no-single-agent", "skip the single-agent baseline run after the final commitment (it costs one more "
        "workflow run)",
        switch="--no-single-agent"))
    memory: bool = field(default=False, metadata=_option(
        "--memory", "SciMARS + Memory: every probe reads and writes one shared evidence graph, each on its own "
        "branch (memory-fixed always does)", switch="--memory"))
    # None: the executor evolve() is handed, else the subprocess sandbox (a library call's default)
    executor: str | None = field(default=None, metadata=_option(
        "--executor", "the sandbox of generated programs: docker (a container each; build its image with "
        "`python -m engine.sandbox.image build`), subprocess, or auto (default: $TRELLIS_EXECUTOR when set, else "
        "docker when a daemon answers and the image is built, else subprocess)", choices=EXECUTOR_KINDS,
        flag_default="auto"))
    node_token_cap: int | None = field(default=None, metadata=_option(
        "--node-token-cap", "review (--search repair): repair a node that spends more tokens than this in a run",
        bounds=(100, MAX_TOKENS)))
    external_agents: bool = field(default=False, metadata=_option(
        "--external-agents", "with --start synthesized: a built external agent may play a role it fits",
        switch="--external-agents"))

    def budget(self) -> Budget:
        """A fresh budget with this run's limits (it counts what the run spends)."""
        return Budget(max_tokens=self.max_tokens, max_cost_usd=self.max_cost_usd, max_calls=self.max_calls)

    @property
    def warm(self) -> bool:
        """Whether the search starts from the archive's nearest workflow when nothing else is asked:
        ``warm_start``, else every search but those that adapt within the task (SciMARS, the
        fixed-memory control)."""
        return self.warm_start if self.warm_start is not None else self.search not in TAKES_MEMORY

    @property
    def shares_memory(self) -> bool:
        """Whether the probes share one evidence graph: asked, or the search always does."""
        return self.memory or self.search in NEEDS_MEMORY

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser, names: tuple[str, ...] | None = None) -> None:
        """Every field with a flag of its own (or those of ``names``), as an option of ``parser``
        (the model options are engine.cli's add_model_arguments: ``models`` and ``model`` are read
        from them)."""
        for f in fields(cls):
            o = f.metadata
            if not o.get("flag") or (names is not None and f.name not in names):
                continue
            if o["switch"]:
                parser.add_argument(o["switch"], dest=f.name, action="store_const",
                                    const=not (f.default if f.default is not None else False),
                                    default=f.default, help=o["help"])
                continue
            kind = _kind(f)
            default = f.default if o["flag_default"] is _SAME else o["flag_default"]
            parser.add_argument(o["flag"], dest=f.name, default=default, help=o["help"], metavar=o["metavar"],
                                choices=o["choices"], type=bounded(*o["bounds"], kind) if o["bounds"] else None)

    @classmethod
    def from_options(cls, options: dict, models: ModelSettings | None = None) -> "RunSpec":
        """The spec of parsed options (``add_arguments``'s), with the model options' settings."""
        given = {f.name: options[f.name] for f in fields(cls) if f.metadata.get("flag") and f.name in options}
        if models is not None:
            given["models"] = models
        return cls(**given)


# Where else each field is surfaced, beside the command line: the studio's run form and the Run
# row (webapp/runs/models.py Run.spec, forms.py NewRunForm), or why not. A new field must be
# added here too (tests/unit/test_run_spec.py fails until it is).
SURFACES: dict[str, str] = {
    "search": "form field and Run column `search`",
    "iterations": "form field and Run column `iterations`",
    "seed": "form field and Run column `seed`",
    "max_tokens": "form field and Run column `max_tokens`",
    "max_cost_usd": "command line only: a studio run's budget is its tokens",
    "max_calls": "command line only: a studio run's budget is its tokens",
    "model": "form field and Run column `model`",
    "models": "form fields (per role) and Run column `model_settings`",
    "start": "form field and Run column `start`",
    "warm_start": "command line only: a studio search warm-starts as its procedure does",
    "single_agent": "form field and Run column `single_agent`",
    "memory": "form field and Run column `memory`",
    "executor": "form field and Run column `executor`",
    "node_token_cap": "form field and Run column `node_token_cap`",
    "external_agents": "command line only: the studio synthesizes without external agents",
}


@dataclass(frozen=True)
class Option:
    """One field of RunSpec as any surface shows it: the command line's flag, the studio's form
    field (webapp/runs/forms.py ``spec_field``), each built from these and nothing else."""

    name: str
    kind: type                      # bool, int, float or str
    default: object                 # what a run that does not set it gets (a command line's own default aside)
    help: str
    bounds: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None


def option(name: str) -> Option:
    """The option of RunSpec's field ``name``."""
    f = next((f for f in fields(RunSpec) if f.name == name), None)
    if f is None:
        raise KeyError(f"RunSpec has no field {name!r}")
    o = f.metadata
    default = f.default if o.get("flag_default", _SAME) is _SAME else o["flag_default"]
    return Option(name, _kind(f), default, o.get("help", ""), o.get("bounds"), o.get("choices"))


def _kind(f) -> type:
    default = f.default if f.default is not MISSING else None
    if isinstance(default, bool):
        return bool
    text = str(f.type)
    return float if "float" in text else int if "int" in text else str


def studio_cannot_record(spec: RunSpec) -> list[str]:
    """The options a studio run has no place for (SURFACES: command line only) that ``spec`` sets."""
    default = RunSpec()
    return [f.name for f in fields(RunSpec) if SURFACES[f.name].startswith("command line only")
            and getattr(spec, f.name) != getattr(default, f.name)]
