"""Shapes the stored run for the pages: the DAG with agent states, the score series, the
side-by-side diff of two versions, and paged event payloads."""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

import networkx as nx

from engine.judge_rubric import CRITERIA
from engine.replay import RunRecord, SearchState, fold
from engine.trace import Event as EngineEvent

from .models import Event, Run

# The kinds each panel's state is folded from (engine/replay.py): a page folds only those, so
# a long run's prompts and programs are never read to draw its DAG or its scores.
PROBE_KINDS = ("run_started", "agent_started", "agent_finished", "route", "run_finished", "run_failed")
SCORE_KINDS = ("judgement", "search_iteration")


EVENT_FIELDS = ("source", "seq", "ts", "kind", "agent", "iteration", "payload")


def fold_rows(rows) -> SearchState:
    """The engine's state fold over stored Event rows (a queryset), in its order: read as the
    engine's events straight from the columns, no row objects made."""
    return fold(EngineEvent(run_id=source, seq=seq, ts=ts, kind=kind, agent=agent or None, iteration=iteration,
                            payload=payload)
                for source, seq, ts, kind, agent, iteration, payload in rows.values_list(*EVENT_FIELDS))


def probe_record(run: Run, source: str, until: int | None = None) -> RunRecord | None:
    """One probe of the run as its events tell it (up to studio seq ``until``)."""
    rows = run.events.filter(source=source, kind__in=PROBE_KINDS)
    if until is not None:
        rows = rows.filter(seq__lte=until)
    return fold_rows(rows.order_by("seq")).probes.get(source)


def graph_state(run: Run) -> dict:
    """What the DAG panel shows. While a run is going: the workflow being executed now (the
    latest probe's candidate, which is also what a pending decision is about). Once it has
    stopped: its final version (what was scored). Agent states come from the latest execution of
    that workflow, folded from its events (engine/replay.py) as replay and live updates fold them."""
    version = run.current_version if run.is_active else (run.final_version or run.current_version)
    starts = run.events.filter(kind="run_started").order_by("-seq")
    if not run.is_active and version:
        starts = starts.filter(payload__workflow_hash=version.hash)  # the final version's latest execution
    started = starts.only("source").first()
    record = probe_record(run, started.source) if started else None
    if record is None or record.workflow_data is None:
        if version is None:
            return {"workflow": None, "states": {}, "label": "no workflow yet", "source": None}
        return _state(version.data, {}, f"v{version.number}", True, None, version)
    label = _label(version, record.workflow_hash, record.iteration, run.is_active)
    return _state(record.workflow_data, record.dag_states(), label, record.finished, started.source, version)


def _label(version, workflow_hash: str | None, iteration: int, active: bool) -> str:
    is_version = version is not None and version.hash == workflow_hash
    label = (f"v{version.number}" if is_version else "initial workflow" if iteration == 0 else "candidate")
    return f"iteration {iteration}: {label}" if active else f"{label} (final)"


def probe_label(run: Run, workflow_hash: str, iteration: int, version=None) -> dict:
    """What the DAG panel says about a probe that has just started (the run is going), given the
    run's latest version then (by default, now)."""
    version = version or run.current_version
    return {"label": _label(version, workflow_hash, iteration, True), "version": version.number if version else None,
            "version_hash": version.hash if version else None, "finished": False}


def _state(workflow: dict, states: dict, label: str, finished: bool, source: str | None, version) -> dict:
    for agent in workflow.get("agents", []):
        states.setdefault(agent["id"], "waiting")
    return {"workflow": workflow, "states": states, "label": label, "finished": finished, "source": source,
            "version": version.number if version else None, "version_hash": version.hash if version else None}


def layered_positions(workflow: dict, dx: int = 230, dy: int = 80) -> dict[str, dict]:
    """Top-to-bottom layers of the DAG (networkx's topological generations), each layer
    centred, so a pipeline reads downwards with room beside each edge for its contract."""
    g = nx.DiGraph()
    g.add_nodes_from(a["id"] for a in workflow.get("agents", []))
    g.add_edges_from((e["source"], e["target"]) for e in workflow.get("edges", []))
    order = {a["id"]: i for i, a in enumerate(workflow.get("agents", []))}
    try:
        layers = list(nx.topological_generations(g))
    except nx.NetworkXUnfeasible:  # a stored cyclic graph still draws, in declaration order
        layers = [[n] for n in sorted(g.nodes, key=order.get)]
    pos = {}
    for x, layer in enumerate(layers):
        layer = sorted(layer, key=order.get)
        for y, node in enumerate(layer):
            pos[node] = {"x": (y - (len(layer) - 1) / 2) * dx, "y": x * dy}
    return pos


def short(text: str, limit: int = 34) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def attachments_line(attachments: list[dict]) -> str:
    """What an agent was given from the library, on its node: an external agent by name, else
    how many skills and references (the panel a click opens lists them)."""
    external = [x.get("name", "") for x in attachments if x.get("kind") == "agent"]
    if external:
        return f"\n[external: {external[0]}]"
    counts = [(sum(1 for x in attachments if x.get("kind") == k), word) for k, word in
              (("skill", "skill"), ("resource", "ref"), ("tool", "tool"))]
    said = ", ".join(f"{n} {word}{'s' if n > 1 else ''}" for n, word in counts if n)
    return f"\n+ {said}" if said else ""


def cytoscape_elements(workflow: dict, states: dict[str, str]) -> list[dict]:
    els: list[dict] = []
    pos = layered_positions(workflow)
    for a in workflow.get("agents", []):
        roles = a.get("roles", [])
        label = a["id"] if roles == [a["id"]] else f"{a['id']}\n({' + '.join(roles)})"
        label += attachments_line(a.get("attachments") or [])
        els.append({"data": {"id": a["id"], "label": label, "state": states.get(a["id"], "waiting")},
                    "position": pos.get(a["id"], {"x": 0, "y": 0})})
    side = 1
    for e in workflow.get("edges", []):
        span = round(abs(pos.get(e["target"], {}).get("y", 0) - pos.get(e["source"], {}).get("y", 0)) / 80)
        # An edge that skips layers bows out to one side (alternating) instead of crossing the nodes between.
        bow = 0 if span <= 1 else side * (40 + 25 * span)
        side = -side if span > 1 else side
        els.append({"data": {"id": f"{e['source']}->{e['target']}:{e['artifact']}", "source": e["source"],
                             "target": e["target"], "label": f"{e['artifact']}: {short(e['contract'])}",
                             "contract": e["contract"], "kind": "edge", "bow": bow}})
    for r in workflow.get("routes", []):
        els.append({"data": {"id": f"route:{r['source']}:{r['on']}", "source": r["source"], "target": r["target"],
                             "label": f"{r['on']} ≤{r['max_loops']}", "kind": "route"}})
    return els


def incumbent_j(run_id: int, before_seq: int | None = None) -> list[float | None]:
    """For each judgement event (up to ``before_seq``), in order: the J of the incumbent it was
    judged against, i.e. of the workflow last adopted before it (the first probe's own J for the
    first probe). Not the best J so far: a person may adopt a lower one, and that is the incumbent."""
    events = Event.objects.filter(run_id=run_id, kind__in=SCORE_KINDS).order_by("seq")
    if before_seq is not None:
        events = events.filter(seq__lte=before_seq)
    return [point.incumbent_J for point in fold_rows(events).scores]


def score_series(run: Run) -> dict:
    rows = list(run.judgements.order_by("pk"))
    incumbent = incumbent_j(run.pk)
    incumbent += [incumbent[-1] if incumbent else None] * (len(rows) - len(incumbent))
    return {
        "iteration": [j.iteration for j in rows],
        "J": [j.J for j in rows],
        "criteria": {c: [j.scores.get(c) for j in rows] for c in CRITERIA},
        "checks_passed": [sum(1 for c in j.checks if c.get("passed")) for j in rows],
        "checks_total": [len(j.checks) for j in rows],
        "validation": [(j.validation or {}).get("value") for j in rows],
        "tokens": [(j.budget_used or {}).get("tokens") for j in rows],
        "calls": [(j.budget_used or {}).get("calls") for j in rows],
        "incumbent_J": incumbent[:len(rows)],
    }


def workflow_lines(data: dict) -> list[str]:
    """A workflow as readable lines, in a stable order, for a line diff."""
    lines = [f"workflow {data.get('name', '')}"]
    for a in sorted(data.get("agents", []), key=lambda a: a["id"]):
        lines.append(f"agent {a['id']}: roles {', '.join(a.get('roles', []))}")
        for k in ("inputs", "outputs"):
            for name, typ in sorted((a.get(k) or {}).items()):
                lines.append(f"  {k[:-1]} {name}: {typ}")
        if a.get("tools"):
            lines.append(f"  tools {', '.join(a['tools'])}")
        if a.get("model"):
            lines.append(f"  model {a['model']}")
        if a.get("prompt"):
            lines.append(f"  prompt: {a['prompt']}")
    for e in sorted(data.get("edges", []), key=lambda e: (e["source"], e["target"], e["artifact"])):
        lines.append(f"edge {e['source']} -> {e['target']}  {e['artifact']}: {e['contract']}")
    for r in sorted(data.get("routes", []), key=lambda r: (r["source"], r["on"])):
        lines.append(f"route {r['source']} on {r['on']} -> {r['target']} (max {r['max_loops']})")
    harness = data.get("harness", {})
    for role, text in sorted((harness.get("procedures") or {}).items()):
        lines.append(f"procedure {role}: {text}")
    for k, v in sorted((harness.get("coordination") or {}).items()):
        lines.append(f"coordination {k}: {json.dumps(v)}")
    memory = harness.get("memory") or {}
    if "roles" in memory:  # one line per role and field, so a diff shows exactly what changed
        for role, policy in sorted(memory["roles"].items()):
            for k, v in policy.items():
                lines.append(f"memory {role} {k}: {json.dumps(v)}")
    else:  # a workflow saved before per-role policies
        for k, v in sorted(memory.items()):
            lines.append(f"memory {k}: {json.dumps(v)}")
    return lines


@dataclass
class DiffRow:
    tag: str          # equal / replace / delete / insert
    left: str
    right: str


def side_by_side(a: dict, b: dict) -> list[DiffRow]:
    left, right = workflow_lines(a), workflow_lines(b)
    rows: list[DiffRow] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=left, b=right, autojunk=False).get_opcodes():
        if tag == "equal":
            rows.extend(DiffRow("equal", left[i], right[j1 + k]) for k, i in enumerate(range(i1, i2)))
            continue
        span = max(i2 - i1, j2 - j1)
        for k in range(span):
            lt = left[i1 + k] if i1 + k < i2 else ""
            rt = right[j1 + k] if j1 + k < j2 else ""
            rows.append(DiffRow(tag if lt and rt else ("delete" if lt else "insert"), lt, rt))
    return rows


PAGE_CHARS = 4000


def paged_payload(event: Event, field: str | None, page: int) -> dict:
    """A payload with every long string cut to one page; ``field`` asks for one page of one
    long string (``messages.1.content``), so a 2 MB stdout is read a page at a time."""
    if field:
        value = _lookup(event.payload, field)
        text = value if isinstance(value, str) else json.dumps(value, indent=2, default=str)
        pages = max(1, -(-len(text) // PAGE_CHARS))
        page = min(max(page, 1), pages)
        return {"field": field, "text": text[(page - 1) * PAGE_CHARS: page * PAGE_CHARS], "page": page,
                "pages": pages, "chars": len(text)}
    return {"items": list(_flatten(event.payload, ""))}


def _lookup(obj, path: str):
    for part in path.split("."):
        obj = obj[int(part)] if isinstance(obj, list) else obj[part]
    return obj


def _flatten(obj, prefix: str):
    """(path, preview, long?) for every leaf, long strings and big values shortened."""
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(obj, list) and obj and any(isinstance(x, (dict, list)) for x in obj):
        for i, v in enumerate(obj):
            yield from _flatten(v, f"{prefix}.{i}" if prefix else str(i))
    else:
        text = obj if isinstance(obj, str) else json.dumps(obj, default=str)
        long = len(text) > PAGE_CHARS // 4
        yield {"path": prefix, "preview": text[: PAGE_CHARS // 4], "long": long, "chars": len(text),
               "code": prefix.endswith(("code", "content", "response", "stdout_tail", "stderr_tail"))}
