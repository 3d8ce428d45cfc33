from __future__ import annotations

from django import forms
from django.conf import settings
from django.core.validators import RegexValidator

from engine.limits import MAX_MODEL_CHARS, MAX_NOTE_CHARS, MAX_SEED, MAX_TOKENS, MODEL_NAME_RE
from engine.search.registry import NEEDS_MEMORY, TAKES_MEMORY

from .models import EXECUTOR_CHOICES, GatePolicy, Run


def example_choices() -> list[tuple[str, str]]:
    root = settings.TRELLIS_EXAMPLES_DIR
    return [(str(p), p.name) for p in sorted(root.iterdir()) if (p / "Problem.md").exists()]


class NewRunForm(forms.Form):
    project = forms.CharField(max_length=120, initial="Demo project")
    task_folder = forms.ChoiceField(label="Task", choices=example_choices)
    search = forms.ChoiceField(choices=Run.SEARCHES, initial="mimosa")
    iterations = forms.IntegerField(min_value=1, max_value=50, initial=4)
    gate_policy = forms.ChoiceField(label="Gate", choices=GatePolicy.choices, initial=GatePolicy.MANUAL)
    # Ranges come from the engine (engine/limits.py), so the form refuses what a run would.
    seed = forms.IntegerField(initial=0, min_value=0, max_value=MAX_SEED)
    model = forms.CharField(required=False, max_length=MAX_MODEL_CHARS,
                            validators=[RegexValidator(MODEL_NAME_RE, "write a litellm model as provider/model, "
                                                       "e.g. openai/gpt-4o-mini")],
                            help_text="litellm model for every role; blank uses the offline provider")
    max_tokens = forms.IntegerField(min_value=1000, max_value=MAX_TOKENS, initial=2_000_000, label="Token budget")
    single_agent = forms.BooleanField(required=False, initial=True, label="Single-agent baseline",
                                      help_text="After the search, run one agent playing every role on the same "
                                                "budget, and score it officially beside the team")
    memory = forms.BooleanField(required=False, initial=False, label="Shared memory (SciMARS + Memory)",
                                help_text="SciMARS only: the probes share one evidence graph, each writing on its "
                                          "own branch; later probes read the selected branches. "
                                          "memory-fixed always shares.")
    executor = forms.ChoiceField(label="Sandbox", choices=EXECUTOR_CHOICES, initial="auto", required=False,
                                 help_text="Where generated programs run: a Docker container each (no network, "
                                           "read-only root; needs the daemon and `python -m engine.sandbox.image "
                                           "build`), the subprocess sandbox, or auto")

    def clean(self) -> dict:
        d = super().clean()
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
                "executor": d["executor"] or "auto"}  # a form posted without it: auto


class DecisionForm(forms.Form):
    """A person's approve / veto: the reason is optional and bounded like any note."""

    reason = forms.CharField(required=False, max_length=MAX_NOTE_CHARS, strip=True)
