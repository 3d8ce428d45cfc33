"""python manage.py report <run id> --out report.html [--pdf]: a run's self-contained report
(webapp/runs/report.py); --pdf also prints it to PDF beside it (report.pdf), with Chromium."""
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from webapp.runs.models import Run
from webapp.runs.report import ReportError, report_html, report_pdf


class Command(BaseCommand):
    help = "Export a run as one self-contained HTML file (and, with --pdf, as PDF)."

    def add_arguments(self, parser):
        parser.add_argument("run_id", type=int)
        parser.add_argument("--out", type=Path, default=None, help="the HTML file to write (default: run-<id>.html)")
        parser.add_argument("--pdf", action="store_true", help="also write the PDF (the --out name with .pdf)")

    def handle(self, run_id: int, out: Path | None, pdf: bool, **options):
        run = Run.objects.select_related("task").filter(pk=run_id).first()
        if run is None:
            raise CommandError(f"no run {run_id} in this studio's database")
        out = out or Path(f"run-{run_id}.html")
        if not out.parent.is_dir():
            raise CommandError(f"{out.parent} is not a folder: cannot write {out}")
        text = report_html(run)
        out.write_text(text, encoding="utf-8")
        self.stdout.write(f"wrote {out} ({len(text.encode()):,} bytes)")
        if pdf:
            target = out.with_suffix(".pdf")
            try:
                target.write_bytes(report_pdf(text))
            except ReportError as exc:
                raise CommandError(str(exc))
            self.stdout.write(f"wrote {target} ({target.stat().st_size:,} bytes)")
