"""python manage.py annotations export|import — a project's annotations as a dataset and back.

    python manage.py annotations export --project "My project" [--queue ID] [--format jsonl|csv] [-o FILE]
    python manage.py annotations import --project "My project" FILE [--label-set NAME] [--as USER]

Import matches rows to the project's runs by run + target_kind + target_ref and writes all of
them or none: a bad row is reported by line and column and nothing is imported."""
from __future__ import annotations

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from webapp.annotations import annotating as ann
from webapp.annotations.models import Annotation, AnnotationQueue, LabelSet
from webapp.teams.models import Project


class Command(BaseCommand):
    help = "Export a project's annotations (JSONL or CSV) or import labels from such a file."

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="action", required=True)
        exp = sub.add_parser("export", help="write the project's annotations with their items")
        exp.add_argument("--project", required=True, help="project name")
        exp.add_argument("--queue", type=int, help="only this queue's annotations (its id)")
        exp.add_argument("--format", choices=("jsonl", "csv"), help="default: from -o's suffix, else jsonl")
        exp.add_argument("-o", "--output", help="file to write (default: standard output)")
        imp = sub.add_parser("import", help="add labels from a JSONL or CSV file")
        imp.add_argument("file", help="a .jsonl or .csv file")
        imp.add_argument("--project", required=True, help="project name")
        imp.add_argument("--label-set", help="label set for rows that name none")
        imp.add_argument("--as", dest="as_user", required=True,
                         help="the user recorded as importing (and as author of rows that name no known author)")

    def handle(self, *args, **options):
        project = Project.objects.filter(name=options["project"]).first()
        if project is None:
            raise CommandError(f"no project called {options['project']!r}")
        if options["action"] == "export":
            self._export(project, options)
        else:
            self._import(project, options)

    def _export(self, project: Project, options: dict) -> None:
        rows = Annotation.objects.filter(run__task__project=project)
        if options.get("queue"):
            queue = AnnotationQueue.objects.filter(project=project, pk=options["queue"]).first()
            if queue is None:
                raise CommandError(f"{project.name} has no queue {options['queue']}")
            rows = rows.filter(queue_item__queue=queue)
        out = options.get("output")
        fmt = options.get("format") or ("csv" if out and out.lower().endswith(".csv") else "jsonl")
        data = ann.export_rows(rows)
        text = ann.to_csv(data) if fmt == "csv" else ann.to_jsonl(data)
        if out:
            Path(out).write_text(text, encoding="utf-8")
            self.stderr.write(f"{len(data)} annotation(s) of {project.name} written to {out}")
        else:
            self.stdout.write(text, ending="")

    def _import(self, project: Project, options: dict) -> None:
        user = get_user_model().objects.filter(username=options["as_user"]).first()
        if user is None:
            raise CommandError(f"no user called {options['as_user']!r}")
        default = None
        if options.get("label_set"):
            default = LabelSet.objects.filter(project=project, name=options["label_set"]).first()
            if default is None:
                raise CommandError(f"{project.name} has no label set {options['label_set']!r}")
        path = Path(options["file"])
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"{path}: cannot read ({exc})") from exc
        try:
            made = ann.import_rows(project, user, path.name, text, default, keep_authors=True)
        except ann.ImportFailed as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"imported {len(made)} annotation(s) from {path} into {project.name}")
