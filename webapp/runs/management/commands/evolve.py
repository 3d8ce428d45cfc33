"""python manage.py evolve examples/<task> --search mimosa|scimars|tree|memory-fixed --iterations N [--memory]"""
import argparse
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from engine.budget import Budget
from engine.cli import add_executor_argument, add_model_arguments, bounded, cassette, check_task, model_settings
from engine.errors import TrellisError
from engine.evolve import evolve
from engine.task import load_task
from engine.search.registry import DEFAULT, SEARCHES
from engine.limits import MAX_ITERATIONS, MAX_SEED, MAX_TOKENS


class Command(BaseCommand):
    help = "Evolve a task's workflow with a search procedure and compare official metrics before and after."

    def add_arguments(self, parser):
        parser.add_argument("task")
        parser.add_argument("--search", choices=SEARCHES, default=DEFAULT)
        parser.add_argument("--iterations", type=bounded(1, MAX_ITERATIONS), default=5)
        parser.add_argument("--seed", type=bounded(0, MAX_SEED), default=0)
        parser.add_argument("--max-tokens", type=bounded(1, MAX_TOKENS), default=2_000_000,
                            help=f"token budget of the whole search (at most {MAX_TOKENS:,})")
        parser.add_argument("--no-archive", action="store_true", help="neither warm-start from nor add to the archive")
        parser.add_argument("--no-single-agent", action="store_true",
                            help="skip the single-agent baseline run after the search (it costs one more workflow run)")
        parser.add_argument("--memory", action="store_true",
                            help="SciMARS + Memory: every probe reads and writes one shared evidence graph, "
                                 "each on its own branch (memory-fixed always does)")
        parser.add_argument("--warm-start", action="store_true",
                            help="start SciMARS from the archive's most similar workflow (other searches always do "
                                 "unless --no-archive)")
        add_executor_argument(parser)
        add_model_arguments(parser)

    def handle(self, *args, **o):
        try:
            # the data is checked before the search spends a token on it
            check_task(load_task(o["task"]), self.stdout, Path(settings.TRELLIS_RUNS_DIR) / "preflight-cache")
            args = argparse.Namespace(**o, runs_dir=str(settings.TRELLIS_RUNS_DIR), cache=False)
            cache_dir, replay_only = cassette(args)
            result = evolve(o["task"], search=o["search"], iterations=o["iterations"], seed=o["seed"],
                            budget=Budget(max_tokens=o["max_tokens"]), runs_dir=settings.TRELLIS_RUNS_DIR,
                            out=self.stdout, models=model_settings(args), cache_dir=cache_dir, replay_only=replay_only,
                            archive_dir=None if o["no_archive"] else settings.TRELLIS_ARCHIVE_DIR,
                            single_agent=not o["no_single_agent"], memory=o["memory"],
                            warm_start=True if o["warm_start"] else None, executor_kind=o["executor"])
            if result.failed:
                raise CommandError(result.failed)
        except (TrellisError, NotImplementedError, ValueError) as exc:
            raise CommandError(str(exc)) from exc
