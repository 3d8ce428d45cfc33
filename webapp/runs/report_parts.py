"""Pieces of the printable report that are drawn, not tabled: the task's markdown as HTML, a tree
run's tree and the held-out prediction plots as SVG, and text cut at a word (a reason cut mid-word
reads as a different reason). SVG by hand, like the report's other charts: the report is one
self-contained file that prints without a browser running scripts."""
from __future__ import annotations

import math
from html import escape

from markdown_it import MarkdownIt

# CommonMark with raw HTML off: a task folder's markdown is text someone uploaded, never markup
# the report trusts; tables and strikethrough as GitHub renders them.
_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["table", "strikethrough"])


def markdown_html(text: str) -> str:
    return _MARKDOWN.render(text)


def cut_at_word(text: str | None, limit: int) -> str:
    """``text`` at most ``limit`` characters, cut at the last space before it (with an ellipsis).
    Leading whitespace is kept: a program's first line keeps its indentation."""
    text = (text or "").rstrip()
    if len(text) <= limit:
        return text
    cut = text[:limit]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def tree_svg(state: dict, metric: str) -> str:
    """The tree: one row per depth, each node with its score; the champion ringed, failed and
    vetoed nodes greyed."""
    nodes = state.get("nodes") or []
    if not nodes:
        return ""
    by_id = {n["id"]: n for n in nodes}
    depth: dict[str, int] = {}

    def depth_of(node_id: str, seen: tuple = ()) -> int:
        if node_id in depth:
            return depth[node_id]
        parent = by_id.get(node_id, {}).get("parent")
        depth[node_id] = 0 if not parent or parent not in by_id or parent in seen else depth_of(parent, seen + (node_id,)) + 1
        return depth[node_id]

    rows: dict[int, list[dict]] = {}
    for node in nodes:
        rows.setdefault(depth_of(node["id"]), []).append(node)
    box_w, box_h, gap_x, gap_y = 112, 40, 14, 34
    widest = max(len(r) for r in rows.values())
    width = max(320, widest * (box_w + gap_x) + gap_x)
    height = len(rows) * (box_h + gap_y) + gap_y
    where: dict[str, tuple[float, float]] = {}
    for d, row in sorted(rows.items()):
        span = len(row) * (box_w + gap_x) - gap_x
        x0 = (width - span) / 2
        for k, node in enumerate(row):
            where[node["id"]] = (x0 + k * (box_w + gap_x), gap_y / 2 + d * (box_h + gap_y))
    champion = state.get("champion")
    out = [f'<svg class="tree" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           'role="img" aria-label="The search tree">']
    for node in nodes:
        parent = node.get("parent")
        if parent in where:
            px, py = where[parent]
            x, y = where[node["id"]]
            out.append(f'<line x1="{px + box_w / 2:.0f}" y1="{py + box_h:.0f}" x2="{x + box_w / 2:.0f}" y2="{y:.0f}" '
                       'stroke="#8a94a3" stroke-width="1.2"/>')
    for node in nodes:
        x, y = where[node["id"]]
        failed = node.get("status") != "scored" or node.get("vetoed")
        fill = "#eef0f3" if failed else "#f3f8f4"
        stroke = "#2f6f4f" if node["id"] == champion else "#9aa4b2"
        width_px = 3 if node["id"] == champion else 1
        score = node.get("score")
        label = f"{metric} {score:.4g}" if isinstance(score, (int, float)) and math.isfinite(score) else (
            "vetoed" if node.get("vetoed") else str(node.get("status") or ""))
        out.append(f'<rect x="{x:.0f}" y="{y:.0f}" width="{box_w}" height="{box_h}" rx="6" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="{width_px}"/>')
        out.append(f'<text x="{x + box_w / 2:.0f}" y="{y + 16:.0f}" text-anchor="middle" font-size="11" '
                   f'font-weight="600">{escape(str(node["id"]))}{" ★" if node["id"] == champion else ""}</text>')
        out.append(f'<text x="{x + box_w / 2:.0f}" y="{y + 31:.0f}" text-anchor="middle" font-size="10" '
                   f'fill="#3c4654">{escape(cut_at_word(label, 20))}</text>')
    out.append("</svg>")
    return "".join(out)


def scatter_svg(xs: list[float], ys: list[float], title: str, x_label: str, y_label: str, *,
                diagonal: bool = False, zero_line: bool = False, width: int = 440, height: int = 320) -> str:
    """A scatter plot; ``diagonal`` draws y = x, ``zero_line`` draws y = 0."""
    pairs = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    left, right, top, bottom = 58, 14, 28, 44
    out = [f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="{escape(title)}"><text x="{left}" y="16" font-size="12" font-weight="600">'
           f'{escape(title)}</text>']
    if not pairs:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" fill="#5b6575">no data</text></svg>')
        return "".join(out)
    x_lo, x_hi = min(p[0] for p in pairs), max(p[0] for p in pairs)
    y_lo, y_hi = min(p[1] for p in pairs), max(p[1] for p in pairs)
    if diagonal:
        x_lo = y_lo = min(x_lo, y_lo)
        x_hi = y_hi = max(x_hi, y_hi)
    if zero_line:
        y_lo, y_hi = min(y_lo, 0.0), max(y_hi, 0.0)
    x_hi, y_hi = (x_hi if x_hi > x_lo else x_lo + 1), (y_hi if y_hi > y_lo else y_lo + 1)

    def sx(v: float) -> float:
        return left + (v - x_lo) / (x_hi - x_lo) * (width - left - right)

    def sy(v: float) -> float:
        return height - bottom - (v - y_lo) / (y_hi - y_lo) * (height - top - bottom)

    out.append(f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" '
               'fill="#fff" stroke="#d5dae1"/>')
    for v in (x_lo, (x_lo + x_hi) / 2, x_hi):
        out.append(f'<text x="{sx(v):.1f}" y="{height - bottom + 14}" text-anchor="middle" font-size="9">{v:.3g}</text>')
    for v in (y_lo, (y_lo + y_hi) / 2, y_hi):
        out.append(f'<text x="{left - 4}" y="{sy(v) + 3:.1f}" text-anchor="end" font-size="9">{v:.3g}</text>')
    if diagonal:
        out.append(f'<line x1="{sx(x_lo):.1f}" y1="{sy(x_lo):.1f}" x2="{sx(x_hi):.1f}" y2="{sy(x_hi):.1f}" '
                   'stroke="#5b6575" stroke-dasharray="4 3"/>')
    if zero_line:
        out.append(f'<line x1="{left}" y1="{sy(0):.1f}" x2="{width - right}" y2="{sy(0):.1f}" stroke="#5b6575" '
                   'stroke-dasharray="4 3"/>')
    out.extend(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.2" fill="#2b6cb0" fill-opacity="0.65"/>' for x, y in pairs)
    out.append(f'<text x="{(left + width - right) / 2}" y="{height - 8}" text-anchor="middle" font-size="10">'
               f'{escape(x_label)}</text>')
    out.append(f'<text x="12" y="{(top + height - bottom) / 2}" text-anchor="middle" font-size="10" '
               f'transform="rotate(-90 12 {(top + height - bottom) / 2})">{escape(y_label)}</text></svg>')
    return "".join(out)
