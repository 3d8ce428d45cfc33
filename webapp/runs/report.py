"""A run's report as ONE self-contained HTML file (inline CSS and SVG, no script, no request to
anywhere) and as PDF (that file printed by the Debian Chromium, headless).

It holds what a scientist hands on: the task, the final workflow drawn (an SVG built here from
presenters.layered_positions), the score charts, the official metric beside the baselines, the
program the final workflow ran (the champion's code for a tree run), what the champion bundle holds
(a tree run's champion.zip, which travels beside this file), the evidence summary, the
annotations people wrote and the decisions they made."""
from __future__ import annotations

import html
import shutil
import subprocess
import tempfile
from pathlib import Path

from django.http import HttpResponse
from django.template.loader import render_to_string
from django.utils import timezone

from engine.search import registry

from . import evidence, visibility
from .bundles import bundle_contents
from .compare import summary as run_summary
from .models import MutationStatus, Run, typed
from .predictions_plot import prediction_plot_data
from .presenters import layered_positions, score_series, short
from .report_parts import cut_at_word, markdown_html, scatter_svg, tree_svg
from .search_state import search_state

NODE_W, NODE_H = 150, 46
COLORS = {"waiting": "#c9cfd8", "running": "#e0a526", "done": "#2f8f5b", "failed": "#c8423b", "skipped": "#9aa3ad"}
PEOPLE = {MutationStatus.APPROVED, MutationStatus.PROMOTED, MutationStatus.VETOED, MutationStatus.ADOPTED}
MAX_CODE_CHARS = 60_000
CHROMIUM = "/usr/bin/chromium"


class ReportError(RuntimeError):
    pass


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def workflow_svg(workflow: dict) -> str:
    """The workflow as an SVG: agents in topological layers (top to bottom), handoffs as arrows
    labelled with their artifact, routes dashed."""
    agents = workflow.get("agents", [])
    if not agents:
        return '<svg width="300" height="40"><text x="10" y="25">no workflow</text></svg>'
    pos = {k: {"x": v["x"], "y": v["y"] * 1.5} for k, v in layered_positions(workflow).items()}
    xs = [p["x"] for p in pos.values()]
    ys = [p["y"] for p in pos.values()]
    pad = 40
    ox, oy = -min(xs) + NODE_W / 2 + pad + 60, -min(ys) + NODE_H / 2 + pad
    width = max(xs) - min(xs) + NODE_W + 2 * pad + 120
    height = max(ys) - min(ys) + NODE_H + 2 * pad
    at = {k: (p["x"] + ox, p["y"] + oy) for k, p in pos.items()}
    out = [f'<svg class="workflow" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="Final workflow">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#67758a"/></marker></defs>']
    parallel: dict[tuple[str, str], list[dict]] = {}
    for e in workflow.get("edges", []):
        parallel.setdefault((e["source"], e["target"]), []).append(e)
    for (source, target), group in parallel.items():
        # several artifacts on one handoff: one arrow, their names on one label
        e = {"source": source, "target": target, "artifact": ", ".join(g["artifact"] for g in group),
             "contract": "; ".join(f'{g["artifact"]}: {g["contract"]}' for g in group)}
        if e["source"] not in at or e["target"] not in at:
            continue
        (x1, y1), (x2, y2) = at[e["source"]], at[e["target"]]
        y1, y2 = y1 + NODE_H / 2, y2 - NODE_H / 2
        span = abs(y2 - y1) > 1.6 * 80 * 1.5 - NODE_H
        if span:  # an edge that skips a layer bows out instead of crossing the agents between
            cx = max(x1, x2) + NODE_W * 1.3
            out.append(f'<path d="M{x1:.0f},{y1:.0f} Q{cx:.0f},{(y1 + y2) / 2:.0f} {x2:.0f},{y2:.0f}" fill="none" '
                       f'stroke="#67758a" stroke-width="1.5" marker-end="url(#arrow)"/>')
            lx, ly = (x1 + 2 * cx + x2) / 4, (y1 + y2) / 2
        else:
            out.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" stroke="#67758a" '
                       f'stroke-width="1.5" marker-end="url(#arrow)"/>')
            lx, ly = (x1 + x2) / 2 + 6, (y1 + y2) / 2 + 4
        out.append(f'<text x="{lx:.0f}" y="{ly:.0f}" font-size="10" fill="#2c3a4c">'
                   f'<title>{_e(e["artifact"])}: {_e(e["contract"])}</title>{_e(short(e["artifact"], 40))}</text>')
    for r in workflow.get("routes", []):
        if r["source"] not in at or r["target"] not in at:
            continue
        (x1, y1), (x2, y2) = at[r["source"]], at[r["target"]]
        cx = min(x1, x2) - NODE_W
        out.append(f'<path d="M{x1 - NODE_W / 2:.0f},{y1:.0f} Q{cx:.0f},{(y1 + y2) / 2:.0f} {x2 - NODE_W / 2:.0f},{y2:.0f}" '
                   f'fill="none" stroke="#b0733a" stroke-dasharray="5,4" stroke-width="1.5" marker-end="url(#arrow)"/>'
                   f'<text x="{cx + 20:.0f}" y="{(y1 + y2) / 2:.0f}" font-size="10" fill="#7a4a1c">'
                   f'{_e(r["on"])} ≤{_e(r["max_loops"])}</text>')
    for a in agents:
        x, y = at[a["id"]]
        roles = a.get("roles", [])
        out.append(f'<g class="agent"><rect x="{x - NODE_W / 2:.0f}" y="{y - NODE_H / 2:.0f}" width="{NODE_W}" '
                   f'height="{NODE_H}" rx="8" fill="#eef2f7" stroke="#3b4656" stroke-width="2"/>'
                   f'<text x="{x:.0f}" y="{y - (4 if roles != [a["id"]] else -4):.0f}" text-anchor="middle" '
                   f'font-size="12" font-weight="600" fill="#13202e">{_e(short(a["id"], 22))}</text>')
        if roles != [a["id"]]:
            out.append(f'<text x="{x:.0f}" y="{y + 12:.0f}" text-anchor="middle" font-size="10" fill="#3b4656">'
                       f'{_e(short(" + ".join(roles), 26))}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def line_chart_svg(lines: list[dict], title: str, y_label: str, y_range: tuple[float, float] | None = None,
                   width: int = 640, height: int = 260) -> str:
    """A small line chart: ``lines`` = [{"name", "x", "y", "color", "dash"}]; None values are gaps."""
    points = [(x, y) for line in lines for x, y in zip(line["x"], line["y"]) if y is not None]
    left, right, top, bottom = 56, 16, 30, 52
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{_e(title)}" class="chart">',
           f'<text x="{left}" y="18" font-size="13" font-weight="600">{_e(title)}</text>']
    if not points:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#5b6575">no data</text></svg>')
        return "".join(out)
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = y_range or (min(p[1] for p in points), max(p[1] for p in points))
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    if y1 == y0:
        y0, y1 = y0 - abs(y0) * 0.1 - 0.01, y1 + abs(y1) * 0.1 + 0.01
    pw, ph = width - left - right, height - top - bottom

    def sx(x):
        return left + (x - x0) / (x1 - x0) * pw

    def sy(y):
        return top + ph - (y - y0) / (y1 - y0) * ph

    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="#fff" stroke="#d5dbe3"/>')
    for k in range(5):
        v = y0 + (y1 - y0) * k / 4
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{sy(v):.1f}" y2="{sy(v):.1f}" stroke="#eef1f5"/>'
                   f'<text x="{left - 6}" y="{sy(v) + 4:.1f}" font-size="10" text-anchor="end">{v:.3g}</text>')
    for x in sorted({p[0] for p in points}):
        out.append(f'<text x="{sx(x):.1f}" y="{top + ph + 14}" font-size="10" text-anchor="middle">{_e(x)}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{top + ph + 28}" font-size="10" text-anchor="middle">iteration</text>'
               f'<text x="12" y="{top + ph / 2}" font-size="10" transform="rotate(-90 12 {top + ph / 2})" '
               f'text-anchor="middle">{_e(y_label)}</text>')
    legend_x = left
    for line in lines:
        seg, segs = [], []
        for x, y in zip(line["x"], line["y"]):
            if y is None:
                segs.append(seg)
                seg = []
            else:
                seg.append(f"{sx(x):.1f},{sy(y):.1f}")
        segs.append(seg)
        dash = ' stroke-dasharray="4,3"' if line.get("dash") else ""
        for s in segs:
            if len(s) > 1:
                out.append(f'<polyline points="{" ".join(s)}" fill="none" stroke="{line["color"]}" stroke-width="2"{dash}/>')
        for x, y in zip(line["x"], line["y"]):
            if y is not None and not line.get("dash"):
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{line["color"]}"/>')
        out.append(f'<line x1="{legend_x}" x2="{legend_x + 18}" y1="{height - 10}" y2="{height - 10}" '
                   f'stroke="{line["color"]}" stroke-width="2"{dash}/><text x="{legend_x + 22}" y="{height - 6}" '
                   f'font-size="10">{_e(line["name"])}</text>')
        legend_x += 30 + 6 * len(line["name"])
    out.append("</svg>")
    return "".join(out)


def final_program(run: Run) -> dict | None:
    """The program the final workflow ran (for a tree run: the champion node's), from the last
    tool_call of that probe: {"title", "code"}; None when the trace holds none."""
    calls = run.events.filter(kind="tool_call").order_by("-seq")
    if registry.search_class(run.search).evolves != "workflow":
        champ = (search_state(run) or {}).get("champion")
        for ev in calls:
            call = typed(ev)
            if champ and call is not None and call.node == champ and call.code:
                return {"title": f"champion {champ}", "code": call.code[:MAX_CODE_CHARS]}
    final_hash = ((run.result or {}).get("final") or {}).get("workflow_hash")
    sources = [e.source for e in run.events.filter(kind="run_started").order_by("-seq")
               if final_hash and (started := typed(e)) is not None and started.workflow_hash == final_hash]
    for source in sources:
        call = typed(calls.filter(source=source).first())
        if call is not None and call.code:
            return {"title": f"final workflow's program ({source})", "code": call.code[:MAX_CODE_CHARS]}
    ev = calls.first()
    call = typed(ev)
    if call is not None and call.code:
        return {"title": f"last program run ({ev.source})", "code": call.code[:MAX_CODE_CHARS]}
    return None


def evidence_summary(run: Run) -> dict:
    """Record counts by kind (the graph file, else the trace) and the final probe's checks."""
    try:
        records = evidence.evidence_state(run, can_write=False)["records"]
    except Exception as exc:  # noqa: BLE001 - a damaged graph file must not stop the report
        records, error = [], str(exc)
    else:
        error = ""
    counts: dict[str, int] = {}
    for r in records:
        counts[r["kind"]] = counts.get(r["kind"], 0) + 1
    last = run.judgements.order_by("-iteration", "-created").first()
    checks = [{"name": c.get("name"), "passed": c.get("passed"), "detail": (c.get("detail") or "")[:200]}
              for c in (last.checks if last else [])]
    return {"counts": sorted(counts.items()), "total": len(records), "checks": checks, "error": error,
            "checks_iteration": last.iteration if last else None}


def decisions(run: Run) -> list[dict]:
    rows = []
    for m in run.mutations.order_by("iteration", "created"):
        rows.append({"iteration": m.iteration, "kind": m.kind, "target": m.target,
                     "rationale": cut_at_word(m.rationale, 400), "status": m.get_status_display(),
                     "by": m.decided_by or "–", "reason": cut_at_word(m.reason, 400),
                     "when": m.decided_at, "person": m.status in PEOPLE or m.decided_by.startswith("user:"),
                     "J": (m.evidence or {}).get("J", (m.proposal.get("evidence") or {}).get("J"))})
    return rows


def _task_markdown(run: Run, name: str) -> str:
    """A markdown file of the task folder as HTML (raw HTML in it is shown as text)."""
    path = Path(run.task.folder) / name
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return markdown_html(cut_at_word(text, 20_000))


def _prediction_figures(run: Run) -> dict:
    data = prediction_plot_data(run)
    if data.get("kind") != "values":
        return {"missing": data.get("missing") or ("a classification: see the confusion counts on the run page"
                                                    if data.get("kind") == "classes" else "")}
    truth = [p["truth"] for p in data["points"]]
    predicted = [p["prediction"] for p in data["points"]]
    feature = data["features"][0] if len(data["features"]) == 1 else None
    xs = truth
    if feature:
        try:
            xs = [float(p["x"][0]) for p in data["points"]]
        except (ValueError, IndexError, TypeError):
            feature, xs = None, truth
    return {"n": data["n"], "shown": data["shown"], "unmatched": data["unmatched"],
            "pvt": scatter_svg(truth, predicted, "Prediction vs truth (held out)", "truth", "prediction", diagonal=True),
            "residuals": scatter_svg(xs, [p["residual"] for p in data["points"]], "Residuals (prediction − truth)",
                                     feature or "truth", "residual", zero_line=True)}


def report_context(run: Run) -> dict:
    version = run.final_version  # what was scored, never an edit not adopted
    s = score_series(run)
    j_chart = line_chart_svg([
        {"name": "J", "x": s["iteration"], "y": s["J"], "color": "#1d2430"},
        {"name": "incumbent J", "x": s["iteration"], "y": s["incumbent_J"], "color": "#2f8f5b", "dash": True},
        {"name": "output quality", "x": s["iteration"], "y": s["criteria"]["output_quality"], "color": "#6b5bd6"},
    ], "J and the incumbent per probe", "J", (0.0, 1.0))
    val_chart = line_chart_svg([{"name": f"validation {run.task.metric_name}", "x": s["iteration"], "y": s["validation"],
                                 "color": "#1d5fa8"}], f"Validation {run.task.metric_name} per probe",
                               run.task.metric_name or "validation")
    annotations = list(run.annotations.select_related("author", "label_set").order_by("created"))
    tree = ""
    if registry.search_class(run.search).evolves != "workflow":
        tree = tree_svg(search_state(run) or {}, run.task.metric_name or "score")
    return {"run": run, "task": run.task, "summary": run_summary(run), "problem": _task_markdown(run, "Problem.md"),
            "evaluation": _task_markdown(run, "Evaluation.md"), "tree_svg": tree,
            "predictions": _prediction_figures(run),
            "version": version, "workflow_svg": workflow_svg(version.data) if version else "",
            "j_chart": j_chart, "val_chart": val_chart, "program": final_program(run),
            "evidence": evidence_summary(run), "annotations": annotations, "decisions": decisions(run),
            "versions": list(run.versions.all()), "hindsight": (run.result or {}).get("hindsight"),
            "bundle": bundle_contents(run), "generated": timezone.now()}


def report_html(run: Run) -> str:
    return render_to_string("runs/report.html", report_context(run))


def report_pdf(html_text: str, timeout_s: float = 90) -> bytes:
    """The HTML printed to PDF by headless Chromium (no network: the file needs none)."""
    chromium = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if chromium is None:
        raise ReportError("PDF export needs Chromium (/usr/bin/chromium); the HTML report works without it")
    with tempfile.TemporaryDirectory(prefix="trellis-report-") as tmp:
        src, pdf = Path(tmp) / "report.html", Path(tmp) / "report.pdf"
        src.write_text(html_text, encoding="utf-8")
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--no-pdf-header-footer", f"--user-data-dir={tmp}/profile", f"--print-to-pdf={pdf}", src.as_uri()]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ReportError(f"Chromium did not print the report within {timeout_s:.0f} s")
        if not pdf.exists() or pdf.stat().st_size == 0:
            raise ReportError(f"Chromium wrote no PDF (exit {proc.returncode}): {proc.stderr[-500:]}")
        return pdf.read_bytes()


def _filename(run: Run, ext: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in run.task.name)[:60]
    return f"trellis-run-{run.pk}-{safe}.{ext}"


def report_view(request, run_id: int):
    """GET …/report.html: the file to download (?inline=1 shows it in the browser)."""
    run, _ = visibility.run_for(request.user, run_id)
    response = HttpResponse(report_html(run), content_type="text/html; charset=utf-8")
    if not request.GET.get("inline"):
        response["Content-Disposition"] = f'attachment; filename="{_filename(run, "html")}"'
    return response


def report_pdf_view(request, run_id: int):
    run, _ = visibility.run_for(request.user, run_id)
    try:
        data = report_pdf(report_html(run))
    except ReportError as exc:
        return HttpResponse(str(exc), status=503, content_type="text/plain; charset=utf-8")
    response = HttpResponse(data, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{_filename(run, "pdf")}"'
    return response
