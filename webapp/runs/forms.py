from __future__ import annotations

import os

from django import forms
from django.conf import settings
from django.core.validators import RegexValidator

from engine.limits import MAX_MODEL_CHARS, MAX_NOTE_CHARS, MODEL_NAME_RE
from engine.models import STRUCTURED_MODES, ModelOptions, ModelSettings, ModelSettingsError, parse_role_setting
from engine.run_spec import option
from engine.search.registry import NEEDS_MEMORY, TAKES_MEMORY
from engine.synthesis.start import START_CHOICES
from webapp.tasks.models import Task
from webapp.teams import access

from . import model_policy
from .models import EXECUTOR_CHOICES, GatePolicy, Run

START_FORM_CHOICES = [("", "the search's default")] + [(c, c) for c in START_CHOICES]


def spec_field(name: str, **studio) -> forms.Field:
    """The form field of a run option, derived from its RunSpec field (engine/run_spec.py): its
    type, bounds, choices, default and help are the spec's; ``studio`` holds what the studio says
    or allows differently (a label, its own words, a tighter bound: never a looser one)."""
    o = option(name)
    kwargs: dict = {"initial": o.default, "help_text": o.help, "required": o.default is not None}
    if o.kind is bool:
        cls, kwargs["required"] = forms.BooleanField, False
    elif o.choices is not None:
        cls, kwargs["choices"] = forms.ChoiceField, [(c, c) for c in o.choices]
    else:
        cls = {int: forms.IntegerField, float: forms.FloatField}.get(o.kind, forms.CharField)
        if o.bounds:
            kwargs.update(min_value=o.bounds[0], max_value=o.bounds[1])
    if "choices" in studio and cls is not forms.ChoiceField:  # a free name the studio offers as a list
        cls = forms.ChoiceField
        kwargs = {k: v for k, v in kwargs.items() if k not in ("min_value", "max_value")}
    for bound, tighter in (("min_value", max), ("max_value", min)):
        if bound in studio and bound in kwargs:
            studio[bound] = tighter(studio[bound], kwargs[bound])
    return cls(**{**kwargs, **studio})


def example_choices() -> list[tuple[str, str]]:
    root = settings.TRELLIS_EXAMPLES_DIR
    return [(str(p), p.name) for p in sorted(root.iterdir()) if (p / "Problem.md").exists()]


def task_choices(user=None) -> list:
    """The bundled examples, then each task registered in a project ``user`` may start runs in
    (an uploaded or registered folder), grouped by project."""
    choices: list = [("Examples", example_choices())]
    if user is not None and user.is_authenticated:
        examples = {folder for folder, _ in choices[0][1]}
        mine = [t for t in Task.objects.filter(project__in=access.visible_projects(user)).select_related("project")
                .order_by("project__name", "name")
                if t.folder not in examples and (access.role_of(user, t.project) or 0) >= access.REVIEW]
        for project in dict.fromkeys(t.project.name for t in mine):
            choices.append((project, [(t.folder, t.name) for t in mine if t.project.name == project]))
    return choices


class NewRunForm(forms.Form):
    project = forms.CharField(max_length=120, initial="Demo project")
    task_folder = forms.ChoiceField(label="Task", choices=example_choices)

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["task_folder"].choices = task_choices(user)
        # what the operator allows, said before anyone types (a project may have more, in the admin)
        policy = model_policy.policy_for(None)
        self.fields["api_base"].help_text += (f"; allowed here: {', '.join(policy.api_bases)}" if policy.api_bases
                                              else "; the operator allows no server of your own here "
                                                   "(TRELLIS_MODEL_ENDPOINTS)")
        self.fields["api_key_env"].help_text += (f"; allowed here: {', '.join(policy.key_envs)}" if policy.key_envs
                                                 else "; the operator allows no key variable here "
                                                      "(TRELLIS_MODEL_KEY_VARIABLES)")
    # The run options are the run spec's fields (engine/run_spec.py): type, bounds, choices and
    # default from there; what is written here is only what the studio says or allows differently.
    search = spec_field("search", choices=Run.SEARCHES)
    iterations = spec_field("iterations", max_value=50, initial=4)   # a studio run is watched: 50 at most
    start = spec_field("start", label="Start from", required=False, initial="", choices=START_FORM_CHOICES,
                       help_text="the fixed team, a workflow synthesized from the library (skills, references "
                                 "and tools retrieved by type and meaning), or the archive's nearest workflow "
                                 "(else a synthesized one); default: the search's own")
    node_token_cap = spec_field("node_token_cap", label="Node token cap (review)",
                                help_text="the review search repairs a node that spends more tokens than "
                                          "this in one run; blank: cost is not reviewed")
    gate_policy = forms.ChoiceField(label="Gate", choices=GatePolicy.choices, initial=GatePolicy.MANUAL)
    seed = spec_field("seed")
    model = forms.CharField(required=False, max_length=MAX_MODEL_CHARS,
                            validators=[RegexValidator(MODEL_NAME_RE, "write a litellm model as provider/model, "
                                                       "e.g. openai/gpt-4o-mini")],
                            help_text="litellm model for every role, e.g. openai/gpt-4o-mini, or openai/<served name> "
                                      "for an OpenAI-compatible server (llama.cpp, Ollama, vLLM); blank uses the "
                                      "offline provider")
    # Where and how the model is reached (engine/models.py); shown folded under "Model settings".
    # Not a URLField: Django's refuses a host without a dot (http://ollama:11434 in a compose file).
    api_base = forms.CharField(required=False, max_length=300, label="API base",
                              help_text="the server's URL, e.g. http://127.0.0.1:11434/v1 (Ollama) or "
                                        "http://127.0.0.1:8000/v1 (vLLM, llama.cpp); blank: the provider's own")
    api_key_env = forms.CharField(required=False, max_length=128, label="Key variable",
                                  help_text="the name of the worker's environment variable that holds the API key "
                                            "(e.g. OPENAI_API_KEY), never the key itself")
    max_answer_tokens = forms.IntegerField(required=False, min_value=16, max_value=1_000_000,
                                           label="Longest answer (tokens)",
                                           help_text="the max_tokens sent on each call; blank: 4,096 or half the context")
    context_tokens = forms.IntegerField(required=False, min_value=256, max_value=10_000_000,
                                        label="Context size (tokens)",
                                        help_text="the server's context window; prompts are fitted into it")
    model_timeout_s = forms.FloatField(required=False, min_value=1, max_value=86_400, label="Timeout per call (s)",
                                       help_text="local models on a CPU may need 600 or more; blank: 120")
    structured_output = forms.ChoiceField(required=False, initial="auto", label="Structured output",
                                          choices=[(m, m) for m in STRUCTURED_MODES],
                                          help_text="how JSON answers are asked for: json_schema (vLLM, hosted), "
                                                    "json_object (llama.cpp), off, or auto")
    price_in = forms.FloatField(required=False, min_value=0, max_value=10_000, label="Price in (USD / M tokens)",
                                help_text="for a model litellm has no price for")
    price_out = forms.FloatField(required=False, min_value=0, max_value=10_000, label="Price out (USD / M tokens)")
    role_settings = forms.CharField(required=False, max_length=4000, label="Per-role settings",
                                    widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
                                    help_text="one role per line, ROLE:key=value,key=value, e.g. "
                                              "coder:model=ollama/qwen2.5-coder:7b,max_answer_tokens=2048")
    max_tokens = spec_field("max_tokens", min_value=1000, label="Token budget")
    single_agent = spec_field("single_agent", label="Single-agent baseline",
                              help_text="After the search, run one agent playing every role on the same "
                                        "budget, and score it officially beside the team")
    memory = spec_field("memory", label="Shared memory (SciMARS + Memory)",
                        help_text="SciMARS only: the probes share one evidence graph, each writing on its "
                                  "own branch; later probes read the selected branches. "
                                  "memory-fixed always shares.")
    executor = spec_field("executor", label="Sandbox", choices=EXECUTOR_CHOICES, required=False,
                          help_text="Where generated programs run: a Docker container each (no network, "
                                    "read-only root; needs the daemon and `python -m engine.sandbox.image "
                                    "build`), the subprocess sandbox, or auto")

    MODEL_FIELDS = ("api_base", "api_key_env", "max_answer_tokens", "context_tokens", "model_timeout_s",
                    "structured_output", "price_in", "price_out", "role_settings")

    def model_fields(self) -> list:
        return [self[name] for name in self.MODEL_FIELDS]

    def other_fields(self) -> list:
        return [f for f in self if f.name not in self.MODEL_FIELDS]

    def model_settings_open(self) -> bool:
        """Unfold the model settings when one of them was filled in or refused."""
        return any(self[name].errors or (self.is_bound and self.data.get(name) not in (None, "", "auto"))
                   for name in self.MODEL_FIELDS)

    def clean_role_settings(self) -> dict:
        roles: dict[str, ModelOptions] = {}
        for n, line in enumerate(self.cleaned_data.get("role_settings", "").splitlines(), 1):
            if not line.strip():
                continue
            try:
                role, options = parse_role_setting(line)
            except ModelSettingsError as exc:
                raise forms.ValidationError(f"line {n}: {exc}") from None
            if role in roles:
                raise forms.ValidationError(f"line {n}: {role} is set twice; put its settings on one line")
            roles[role] = options
        return roles

    # form field -> the engine's setting (engine/models.py ModelOptions)
    _SETTING = {"api_base": "api_base", "api_key_env": "api_key_env", "max_answer_tokens": "max_answer_tokens",
                "context_tokens": "context_tokens", "model_timeout_s": "timeout_s", "price_in": "price_in",
                "price_out": "price_out", "structured_output": "structured"}

    def _run_options(self) -> dict:
        d = self.cleaned_data
        values = {setting: d.get(name) for name, setting in self._SETTING.items()}
        values = {k: (v.strip() if isinstance(v, str) else v) for k, v in values.items()}
        if values["structured"] == "auto":
            values["structured"] = None
        return {k: v for k, v in values.items() if v not in (None, "")}

    def model_settings(self) -> ModelSettings:
        model = self.cleaned_data.get("model", "").strip() or None
        return ModelSettings(ModelOptions(model=model, **self._run_options()), self.cleaned_data["role_settings"])

    def clean(self) -> dict:
        d = super().clean()
        # The engine's own checks, each on its field (a key pasted instead of its variable's name, ...)
        given = self._run_options()
        for name, setting in self._SETTING.items():
            if given.get(setting) is None:
                continue
            try:
                ModelOptions(**{setting: given[setting]})
            except ModelSettingsError as exc:
                self.add_error(name, str(exc))
                continue
        # The operator's bounds: refused by name, never saying whether a variable is set.
        policy = model_policy.policy_for_name(d.get("project"))
        for name, setting in (("api_base", "api_base"), ("api_key_env", "api_key_env")):
            if given.get(setting) is not None and name not in self.errors:
                for problem in policy.problems(ModelOptions(**{setting: given[setting]})):
                    self.add_error(name, problem)
        key_env = given.get("api_key_env")
        if key_env and "api_key_env" not in self.errors and not os.environ.get(key_env):
            # an allowed variable the studio lacks: the operator's own list, so saying so leaks nothing
            self.add_error("api_key_env", f"{key_env} is allowed but not set in the environment Trellis runs in; "
                                          "ask the operator to set it, or leave this blank")
        for role, options in (d.get("role_settings") or {}).items():
            for problem in policy.problems(options, f"role {role}"):
                self.add_error("role_settings", problem)
        search = d.get("search")
        # evolve() refuses it too (ValueError), but only once a worker runs it: say so here.
        if d.get("memory") and search and search not in TAKES_MEMORY:
            always = " and ".join(sorted(NEEDS_MEMORY))
            self.add_error("memory", f"Shared memory is for SciMARS runs ({always} always shares); {search}'s "
                                     "probes each keep their own evidence graph. Untick it or choose scimars.")
        return d

    def run_options(self) -> dict:
        d = self.cleaned_data
        return {"search": d["search"], "iterations": d["iterations"], "gate_policy": d["gate_policy"],
                "seed": d["seed"], "model": d["model"].strip(), "max_tokens": d["max_tokens"],
                "single_agent": d["single_agent"], "memory": d["memory"] or d["search"] in NEEDS_MEMORY,
                "executor": d["executor"] or "auto",  # a form posted without it: auto
                "start": d.get("start") or "", "node_token_cap": d.get("node_token_cap"),
                "model_settings": self.model_settings().to_dict()}


class DecisionForm(forms.Form):
    """A person's approve / veto: the reason is optional and bounded like any note."""

    reason = forms.CharField(required=False, max_length=MAX_NOTE_CHARS, strip=True)
