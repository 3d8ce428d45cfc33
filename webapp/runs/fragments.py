"""The run page's fragments, rendered for one viewer: by the views on page load (and when the
browser reconnects), and by the WebSocket consumer when a message says one changed. One place
builds each fragment's context, so a pushed fragment is the same as a fetched one."""
from __future__ import annotations

from django.template.loader import render_to_string

from engine.contracts import SYNTAX
from engine.evidence.graph import RECORD_KINDS
from engine.harness import ROLES, MemoryPolicy
from engine.official_gap import Gap
from engine.protocol.events import read_payload_or_none
from engine.search import registry
from engine.synthesis.presentation import STAGES
from engine.synthesis.presentation import present as present_synthesis
from webapp.teams import access
from webapp.teams.models import Role

from .bundles import has_bundle
from .models import Mutation, MutationStatus, Run
from .presenters import side_by_side

# What a pushed message may name; "mutation:<pk>" is one entry of the queue.
NAMES = ("header", "queue", "timeline", "diff", "editor")


def run_context(run: Run, role: Role | None) -> dict:
    versions = list(run.versions.all())
    # a hash's number: its newest adopted version (an edit never adopted named nothing that ran)
    by_hash = {v.hash: v.number for v in versions if v.adopted}
    official = [{"label": label, "version": by_hash.get(d.get("workflow_hash")), **d}
                for label, d in (run.result or {}).items() if label in ("initial", "final")]
    # A trivial baseline handed in as the final (it beat every candidate on the search's folds):
    # what the search itself committed to is shown beside it, and why it was not handed in.
    final = (run.result or {}).get("final") or {}
    if final.get("searched"):
        searched = final["searched"]
        official.append({"label": "searched (not handed in)", "version": by_hash.get(searched.get("workflow_hash")),
                         **searched})
    # The baselines beside them (engine/baselines.py): what the team's result must beat.
    # ... and the final team's lead over each, with its interval over the held-out rows (engine/official_gap.py)
    gaps = (run.result or {}).get("gaps") or {}
    official += [{"label": f"baseline: {name.replace('_', ' ')}", "official": score, "baseline": True,
                  "how": "one agent, every role, same budget" if name == "single_agent" else "engine, no model",
                  "gap": gaps.get(name)}
                 for name, score in ((run.result or {}).get("baselines") or {}).items()]
    search = registry.search_class(run.search)
    evolves_workflow = search.evolves == "workflow"
    return {"run": run, "versions": versions, "official": official, "role": role, "can": access.abilities(role),
            "gap_method": next((Gap(**g).method() for g in gaps.values() if g.get("verdict")), ""),
            "hindsight": (run.result or {}).get("hindsight"),
            "final_verdict": final.get("verdict", ""),
            "pending": run.mutations.filter(status=MutationStatus.PROPOSED).count(),
            # a search that evolves programs (the tree) leaves the team's workflow as it is
            "evolves_workflow": evolves_workflow,
            "search": {"title": search.title, "unit": search.unit, "judges": search.judges,
                       "adopts_edits": search.adopts_edits, "presents": ",".join(search.presents)},
            # its champion's script, checkpoint, plots and report, once written (engine/bundle/)
            "champion_bundle": not evolves_workflow and has_bundle(run),
            "sandbox": sandbox(run)}


def sandbox(run: Run) -> dict:
    """The sandbox the run asked for and, once its search started, the one it runs in and why."""
    stored = run.events.filter(kind="search_started").order_by("-seq").values_list("payload", flat=True).first()
    # a row from before payloads were typed, refused by its model, is said as not started
    started = read_payload_or_none("search_started", stored) if stored is not None else None
    return {"asked": run.executor, "kind": started.executor if started else None,
            "reason": (started.executor_reason if started else None) or ""}


def header(run: Run, role: Role | None, **extra) -> str:
    return render_to_string("runs/_header.html", {**run_context(run, role), **extra})


def queue(run: Run, role: Role | None) -> str:
    return render_to_string("runs/_queue.html", {"run": run, "mutations": list(run.mutations.all()[:50]),
                                                 "can": access.abilities(role)})


def mutation(row: Mutation, role: Role | None) -> str:
    return render_to_string("runs/_mutation.html", {"m": row, "run": row.run, "can": access.abilities(role)})


def search_panels(run: Run) -> list[dict]:
    """How the run started, when it was synthesized from the library (engine/synthesis/
    presentation.py), then what its search did, as it presents itself (engine/protocol/panels.py)."""
    synthesis = run.events.filter(kind="synthesis_stage", payload__stage__in=STAGES).order_by("seq") \
        .only("kind", "agent", "iteration", "payload")
    panels = [panel.to_dict() for panel in present_synthesis(list(synthesis))]
    search = registry.search_class(run.search)
    if not search.presents:
        return panels
    events = run.events.filter(kind__in=search.presents).order_by("seq").only("kind", "agent", "iteration", "payload")
    return panels + [panel.to_dict() for panel in search.present(list(events))]


def search(run: Run, role: Role | None = None) -> str:
    return render_to_string("runs/_search.html", {"run": run, "panels": search_panels(run),
                                                  "unit": registry.search_class(run.search).unit})


def timeline(run: Run, role: Role | None = None) -> str:
    return render_to_string("runs/_timeline.html", {"run": run, "versions": list(run.versions.all())})


def diff_context(run: Run, a: int | None = None, b: int | None = None) -> dict | None:
    """The side-by-side diff of versions ``a`` and ``b`` (default: the latest two); None when
    there is no version yet. KeyError for a version the run does not have."""
    versions = {v.number: v for v in run.versions.all()}
    if not versions:
        return None
    latest = max(versions)
    va, vb = versions[a if a is not None else max(1, latest - 1)], versions[b if b is not None else latest]
    return {"run": run, "a": va, "b": vb, "rows": side_by_side(va.data, vb.data),
            "versions": sorted(versions.values(), key=lambda v: v.number)}


def diff(run: Run, role: Role | None = None) -> str:
    context = diff_context(run)
    return render_to_string("runs/_diff.html", context) if context else '<p class="muted">No versions yet.</p>'


def editor_context(run: Run, role: Role | None, version=None) -> dict:
    version = version or run.current_version
    search = registry.search_class(run.search)
    context = {"run": run, "version": version, "errors": [], "saved": None, "kind": "contract", "role": role,
               "can": access.abilities(role), "adopts_at_next": search.unit if search.adopts_edits and run.is_active
               else ""}
    if version:
        data = version.data
        context["edges"] = [f"{e['source']}->{e['target']}:{e['artifact']}" for e in data.get("edges", [])]
        context["edge_list"] = data.get("edges", [])
        context["agents"] = data.get("agents", [])
        context["procedures"] = sorted((data.get("harness", {}).get("procedures") or {}).items())
        context["memory_roles"] = memory_rows(data)
        context["record_kinds"] = RECORD_KINDS
        context["type_syntax"] = SYNTAX
    return context


def memory_rows(data: dict) -> list[dict]:
    """Each role's memory policy as the editor's fields show it (comma-separated)."""
    policy = MemoryPolicy.from_dict((data.get("harness") or {}).get("memory") or {})
    return [{"role": r, "records": ", ".join(m.records), "retrieves": ", ".join(m.retrieves),
             "subscribes": ", ".join(m.subscribes), "hints": ", ".join(m.hints), "limit": m.limit}
            for r, m in ((r, policy.role(r)) for r in ROLES)]


def editor(run: Run, role: Role | None) -> str:
    return render_to_string("runs/_editor.html", editor_context(run, role))


def render(name: str, run: Run, role: Role | None) -> str | None:
    """One named fragment for a viewer with ``role``; None for a name it does not know, or a
    mutation that is not this run's."""
    if name.startswith("mutation:"):
        row = Mutation.objects.filter(pk=int(name.split(":", 1)[1]), run=run).select_related("run").first()
        return mutation(row, role) if row else None
    builder = {"header": header, "queue": queue, "timeline": timeline, "diff": diff, "editor": editor}.get(name)
    return builder(run, role) if builder else None
