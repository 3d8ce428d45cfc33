"""Issue 38: one option is one field of RunSpec (engine/run_spec.py). Its flag, bounds and
default are derived from the field; where else it is surfaced is listed beside it (SURFACES), and
this test holds every such place to the list: a new field fails here until it is surfaced or said
to be command-line only."""
from __future__ import annotations

from dataclasses import fields, replace

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from engine.models import ModelSettings
from engine.run_spec import SURFACES, RunSpec
from webapp.runs.forms import NewRunForm
from webapp.runs.management.commands.evolve import Command
from webapp.runs.models import Run

FIELDS = [f.name for f in fields(RunSpec)]


def _parser():
    return Command().create_parser("manage.py", "evolve")


def test_every_field_says_where_it_is_surfaced():
    assert set(SURFACES) == set(FIELDS)


@pytest.mark.parametrize("name", FIELDS)
def test_each_field_is_where_its_surfaces_say(name):
    surfaced = SURFACES[name]
    form = NewRunForm.base_fields
    if "form field" in surfaced and name != "models":
        assert name in form, f"{name}: the run form has no field {name}"
    if "Run column" in surfaced:
        column = surfaced.split("Run column `")[1].split("`")[0]
        assert column in {f.name for f in Run._meta.get_fields()}, f"{name}: Run has no column {column}"
    if surfaced.startswith("command line only"):
        assert name not in form and name not in {f.name for f in Run._meta.get_fields()}


@pytest.mark.parametrize("name", [n for n in FIELDS if n in NewRunForm.base_fields])
def test_the_studio_form_field_is_derived_from_the_spec_and_never_looser(name):
    from engine.run_spec import option

    o, field = option(name), NewRunForm.base_fields[name]
    if o.bounds:  # the studio may tighten a bound (a watched run: 50 iterations), never widen one
        assert o.bounds[0] <= field.min_value <= field.max_value <= o.bounds[1]
    if o.choices:
        assert {value for value, _ in field.choices} <= set(o.choices)
    if name not in ("iterations", "start"):  # the two the studio starts elsewhere (4 iterations, the search's start)
        assert field.initial == o.default


@pytest.mark.parametrize("name", [f.name for f in fields(RunSpec) if f.metadata.get("flag")])
def test_each_option_of_its_own_is_a_flag_of_manage_py_evolve(name):
    dests = {a.dest for a in _parser()._actions}
    assert name in dests


def test_python_m_engine_run_takes_the_options_a_run_shares_with_a_search_from_the_spec():
    """`python -m engine run`'s seed, budgets, start, baseline and sandbox are the run spec's own
    options (the same flag, bounds and help as manage.py evolve's), only its token default is one run's."""
    import argparse

    from engine.cli import RUN_MAX_TOKENS, RUN_OPTIONS, add_run_arguments

    run = argparse.ArgumentParser()
    add_run_arguments(run)
    ours = {a.dest: a for a in run._actions}
    theirs = {a.dest: a for a in _parser()._actions}
    assert set(RUN_OPTIONS) <= set(FIELDS)
    for name in RUN_OPTIONS:
        a, b = ours[name], theirs[name]
        assert (a.option_strings, a.help, a.choices, a.const) == (b.option_strings, b.help, b.choices, b.const), name
    args = run.parse_args(["examples/x", "--max-cost", "0.5", "--no-single-agent", "--seed", "4"])
    assert (args.max_cost_usd, args.single_agent, args.seed, args.max_tokens) == (0.5, False, 4, RUN_MAX_TOKENS)
    with pytest.raises(SystemExit):
        run.parse_args(["examples/x", "--max-calls", "0"])


def test_the_flags_parse_into_the_spec_with_their_bounds():
    o = vars(_parser().parse_args(["examples/x", "--search", "tree", "--iterations", "3", "--seed", "7",
                                   "--max-tokens", "5000", "--max-calls", "9", "--no-single-agent", "--memory",
                                   "--warm-start", "--executor", "subprocess", "--start", "team"]))
    spec = RunSpec.from_options(o)
    assert (spec.search, spec.iterations, spec.seed, spec.max_tokens, spec.max_calls) == ("tree", 3, 7, 5000, 9)
    assert (spec.single_agent, spec.memory, spec.warm_start, spec.executor, spec.start) == \
        (False, True, True, "subprocess", "team")
    assert spec.budget().limits()["max_calls"] == 9
    defaults = RunSpec.from_options(vars(_parser().parse_args(["examples/x"])))
    assert replace(defaults, executor=None) == RunSpec()  # the command line asks for auto, a library call for none
    with pytest.raises(CommandError, match="must be between 1 and 100,000,000"):
        _parser().parse_args(["examples/x", "--max-tokens", str(2**40)])


@pytest.mark.django_db
def test_a_run_row_reads_back_into_the_spec_it_was_made_from():
    from webapp.tasks.models import Task
    from webapp.teams.models import Project

    task = Task.objects.create(project=Project.objects.create(name="p"), name="t", folder="examples/discontinuous-1d")
    models = ModelSettings.of("openai/m", api_base="http://127.0.0.1:8080/v1")
    run = Run.objects.create(task=task, search="tree", iterations=3, seed=11, max_tokens=7000, model="openai/m",
                             model_settings=models.to_dict(), start="team", single_agent=False, memory=False,
                             executor="subprocess", node_token_cap=500)
    spec = run.spec()
    assert spec == RunSpec(search="tree", iterations=3, seed=11, max_tokens=7000, model="openai/m",
                           models=ModelSettings.from_dict(models.to_dict()), start="team", single_agent=False,
                           memory=False, executor="subprocess", node_token_cap=500)


def test_a_studio_run_refuses_the_options_it_has_no_place_for(tmp_path):
    with pytest.raises(CommandError, match="no place for max_calls"):
        call_command("evolve", "examples/discontinuous-1d", "--project", "p", "--max-calls", "5")
