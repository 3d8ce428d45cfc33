"""python manage.py run_task examples/<task> [--model M] — run a task with a team of agents.
With ``--project P [--user U]`` the run is recorded in the studio, as the "team as it is" (no
search, no iteration) of that project, and executed here, like ``evolve --project``."""
import argparse
import traceback

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from engine.cli import add_run_arguments, run_from_args
from engine.errors import TrellisError
from engine.preflight import PreflightError
from webapp.runs.models import GatePolicy

from .evolve import Command as Evolve


class Command(BaseCommand):
    help = "Run a task folder with a team of agents (offline provider by default) and print a live trace."

    def add_arguments(self, parser):
        add_run_arguments(parser)
        parser.set_defaults(runs_dir=str(settings.TRELLIS_RUNS_DIR))
        studio = parser.add_argument_group("studio", "record the run in the studio, where it is seen like any other")
        studio.add_argument("--project", help="the studio project to record the run in (created if new)")
        studio.add_argument("--user", help="the person the run is started by; a new project is theirs")

    def handle(self, *args, **options):
        if options.get("project"):
            return self._in_studio(options)

        try:
            result = run_from_args(argparse.Namespace(**options), out=self.stdout)
        except TrellisError as exc:
            if options.get("verbose") and not isinstance(exc, PreflightError):  # Django's --traceback works too

                traceback.print_exc(file=self.stderr)
            raise CommandError(str(exc)) from exc
        if result.status != "completed":
            raise CommandError(f"run {result.run_id} {result.status}: {result.reason}")

    def _in_studio(self, options: dict) -> None:
        """One run of the team, recorded in the studio: the "fixed" search with no iteration, so its
        page, trace, official score and baselines are a studio run's (evolve --project's path)."""
        if options.get("workflow", "team") != "team":
            raise CommandError("--project records the task's team workflow; drop --workflow")
        studio_options = {**options, "search": "fixed", "iterations": 0, "gate": GatePolicy.AUTOMATIC,
                          "memory": False, "replay": None, "cassette": None,
                          "single_agent": options.get("single_agent", True)}
        studio_options.pop("runs_dir", None)  # the studio keeps its runs where it keeps them
        Evolve(stdout=self.stdout, stderr=self.stderr)._in_studio(studio_options)
