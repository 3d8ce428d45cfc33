"""python manage.py evolve examples/<task> --search mimosa|scimars|tree|memory-fixed|fixed|repair --iterations N
[--memory] [--start team|synthesized|archive|FILE]"""
import argparse
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from engine.cli import add_model_arguments, cassette, check_task, model_settings
from engine.errors import TrellisError
from engine.evolve import evolve
from engine.preflight import PreflightError
from engine.run_spec import RunSpec, studio_cannot_record
from engine.synthesis.start import START_CHOICES
from engine.task import load_task
from webapp.tasks import registration
from webapp.teams import access
from webapp.teams.models import Membership, Project, Role

from ... import controls
from ...models import GatePolicy


class Command(BaseCommand):
    help = "Evolve a task's workflow with a search procedure and compare official metrics before and after."

    def add_arguments(self, parser):
        parser.add_argument("task")
        RunSpec.add_arguments(parser)  # the search, its settings, the budget, the start, the sandbox
        parser.add_argument("--no-archive", action="store_true", help="neither warm-start from nor add to the archive")
        add_model_arguments(parser)
        studio = parser.add_argument_group("studio", "record the run in the studio, where it is seen like any "
                                                     "run started there (live while the studio is up)")
        studio.add_argument("--project", help="the studio project to record the run in (created if new)")
        studio.add_argument("--user", help="the person the run is started by; a new project is theirs "
                                           "(without one, only the studio's administrators see a new project)")
        studio.add_argument("--gate", choices=[c for c, _ in GatePolicy.choices], default=GatePolicy.AUTOMATIC,
                            help="who decides each proposal (default automatic: nobody is at the command line; "
                                 "manual suspends the run until a person decides in the studio)")

    def handle(self, *args, **o):
        if o["project"]:
            if o.get("start") and o["start"] not in START_CHOICES:
                raise CommandError(f"--project records a studio run, which starts from {', '.join(START_CHOICES)}; "
                                   "a workflow file is for a run outside the studio (drop --project), or fork a "
                                   "version in the studio")
            return self._in_studio(o)
        try:
            # the data is checked before the search spends a token on it
            check_task(load_task(o["task"]), self.stdout, Path(settings.TRELLIS_RUNS_DIR) / "preflight-cache")
            args = argparse.Namespace(**o, runs_dir=str(settings.TRELLIS_RUNS_DIR), cache=False)
            cache_dir, replay_only = cassette(args)
            result = evolve(o["task"], RunSpec.from_options(o, model_settings(args)), runs_dir=settings.TRELLIS_RUNS_DIR,
                            out=self.stdout, cache_dir=cache_dir,
                            replay_only=replay_only,
                            archive_dir=None if o["no_archive"] else settings.TRELLIS_ARCHIVE_DIR)
            if result.failed:
                raise CommandError(result.failed)
        except (TrellisError, NotImplementedError, ValueError) as exc:
            raise CommandError(str(exc)) from exc


    def _in_studio(self, o: dict) -> None:
        """The run recorded as a studio run of ``--project`` and executed here (controls.run_here)."""
        if o.get("replay") or o.get("cassette") or o.get("cache"):
            raise CommandError("--project records a live run: drop --replay, --cassette and --cache")
        unrecorded = studio_cannot_record(RunSpec.from_options(o))
        if unrecorded:
            raise CommandError(f"--project records a studio run, which has no place for {', '.join(unrecorded)}: "
                               "drop them, or run without --project")
        user = None
        if o["user"]:
            user = get_user_model().objects.filter(username=o["user"]).first()
            if user is None:
                raise CommandError(f"no studio user {o['user']!r} (python manage.py user add {o['user']} ...)")
        try:
            args = argparse.Namespace(**o, runs_dir=str(settings.TRELLIS_RUNS_DIR))
            models = model_settings(args)
            spec = registration.checked_task(o["task"])  # runs evaluate.py: not inside the transaction
            with transaction.atomic():
                project, created = Project.objects.get_or_create(name=o["project"])
                if created and user is not None:
                    Membership.objects.create(project=project, user=user, role=Role.OWNER)
                elif user is not None and (access.role_of(user, project) or 0) < access.REVIEW:
                    raise CommandError(f"{user.get_username()} is not a reviewer of {project.name!r}")
                task = registration.register_task(project, spec)
        except PreflightError as exc:
            raise CommandError(str(exc)) from exc
        except (TrellisError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"recording in the studio: project {project.name!r}, task {task.name}")
        run = controls.run_here(task, user, out=self.stdout, search=o["search"], iterations=o["iterations"],
                                seed=o["seed"], gate_policy=o["gate"], max_tokens=o["max_tokens"],
                                model_settings=models.to_dict(),
                                single_agent=o["single_agent"], memory=o["memory"], executor=o["executor"],
                                start=o.get("start") or "", node_token_cap=o.get("node_token_cap"))
        self.stdout.write(f"run {run.pk}: {run.get_status_display()} · /runs/{run.pk}/")
        if run.status == "failed":
            raise CommandError(f"run {run.pk} failed: {run.status_reason[:2000]}")
