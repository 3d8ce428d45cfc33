"""python manage.py run_task examples/<task> [--model M] — run a task with a team of agents."""
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from engine.cli import add_run_arguments, run_from_args
from engine.errors import TrellisError
from engine.preflight import PreflightError


class Command(BaseCommand):
    help = "Run a task folder with a team of agents (offline provider by default) and print a live trace."

    def add_arguments(self, parser):
        add_run_arguments(parser)
        parser.set_defaults(runs_dir=str(settings.TRELLIS_RUNS_DIR))

    def handle(self, *args, **options):
        import argparse

        try:
            result = run_from_args(argparse.Namespace(**options), out=self.stdout)
        except TrellisError as exc:
            if options.get("verbose") and not isinstance(exc, PreflightError):  # Django's --traceback works too
                import traceback

                traceback.print_exc(file=self.stderr)
            raise CommandError(str(exc)) from exc
        if result.status != "completed":
            raise CommandError(f"run {result.run_id} {result.status}: {result.reason}")
