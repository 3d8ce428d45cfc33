"""``evolve`` around any search, on the fake executor: the official evaluator runs once per end
and only after the search, the final workflow is archived and a similar task then warm-starts
from it. The real end-to-end evolve runs (CLI, tree) are in tests/integration/test_evolve.py."""
import io
import json

from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.trace import read_events
from tests.fakes import FakeExecutor, split_spec


def test_evolve_reports_initial_and_final_official_metrics_side_by_side(tmp_path, examples):
    calls = []

    def counting_official(task, run_dir, sha):
        from engine.official import official_metric

        calls.append(sha)
        return official_metric(task, run_dir, sha)

    result = evolve(examples / "diabetes-progression",
                    RunSpec(search="mimosa", iterations=2, seed=1, max_tokens=1_000_000), runs_dir=tmp_path,
                    out=io.StringIO(), official=counting_official, executor=FakeExecutor(tmp_path / "sandbox"))
    # once per end, then once per distinct probed prediction file (the hindsight), all after the search
    probed = {json.loads(f.read_text()).get("predictions_sha256") for f in (result.run_dir / "probes").glob("*/summary.json")}
    assert len(calls) == 2 + len(probed - {None})
    for end in (result.initial, result.final):
        assert end["official"]["ok"] and end["official"]["metric"] == "r2"
    assert result.final["J"] >= result.initial["J"]
    events = list(read_events(result.run_dir / "search.jsonl"))
    kinds = [e.kind for e in events]
    assert kinds[0] == "search_started" and kinds[-1] == "search_finished"
    # the official evaluation comes only after the last search iteration
    last_iteration = max((i for i, k in enumerate(kinds) if k in {"search_iteration", "judgement"}), default=0)
    assert min(i for i, k in enumerate(kinds) if k == "official_evaluation") > last_iteration
    assert (result.run_dir / "final_workflow.json").is_file()
    # beside the team: the single agent on the same budget, scored officially, and the hindsight
    assert result.single_agent["status"] == "completed" and result.baselines["single_agent"]["ok"]
    assert (result.run_dir / "single-agent" / "trace.jsonl").is_file()
    assert [(c["a"], c["b"]) for c in result.hindsight["correlations"]] == [
        ("J", "validation"), ("J", "official"), ("validation", "official")]
    assert len(result.hindsight["candidates"]) == len(list((result.run_dir / "probes").glob("*/summary.json")))
    assert [e.payload["which"] for e in events if e.kind == "official_evaluation"] == ["initial", "final", "single_agent"]
    assert sum(e.kind == "hindsight" for e in events) == 1


def test_evolve_archives_its_final_workflow_and_the_same_task_then_warm_starts(tmp_path, examples):
    archive = tmp_path / "archive"
    out = io.StringIO()

    def run(task, iterations):
        return evolve(examples / task, RunSpec(search="mimosa", iterations=iterations, seed=1), runs_dir=tmp_path,
                      out=out, archive_dir=archive, executor=FakeExecutor(tmp_path / "sandbox"))

    first = run("diabetes-progression", 1)
    assert first.start["path"] == "de_novo" and first.start["similarity"] is None
    assert "entry" in first.archived
    second = run("diabetes-progression", 1)
    assert second.start["path"] == "warm_start" and second.start["similarity"] > 0.7
    assert second.initial["workflow_hash"] == first.final["workflow_hash"]
    other = run("discontinuous-1d", 0)
    assert other.start["path"] == "de_novo" and other.start["similarity"] < 0.7


def test_a_final_workflow_without_an_official_score_fails_the_run_and_is_not_archived(tmp_path, examples):
    def refusing_official(task, run_dir, sha):
        return {"ok": False, "error": "evaluate.py rejected the predictions: 3 ids missing"}

    out = io.StringIO()
    # diabetes: the fake's line beats the trivial baselines there, so the final is the team's own
    result = evolve(examples / "diabetes-progression",
                    RunSpec(search="mimosa", iterations=1, seed=1, single_agent=False), runs_dir=tmp_path, out=out,
                    official=refusing_official, archive_dir=tmp_path / "archive",
                    executor=FakeExecutor(tmp_path / "sandbox"))
    assert result.failed.startswith("the final workflow has no official score") and "3 ids missing" in result.failed
    assert "FAILED     the final workflow has no official score" in out.getvalue()
    assert result.archived == {"skipped": result.failed}
    finished = [e for e in read_events(result.run_dir / "search.jsonl") if e.kind == "search_finished"]
    assert finished[0].payload["failed"] == result.failed


def test_a_new_tasks_text_is_embedded_ahead_only_by_a_search_that_will_look_it_up(tmp_path, examples, monkeypatch):
    """The search decides whether it consults the archive (a warm start, or --start archive), and only
    then is a task's text handed to a process of its own to embed; SciMARS adapts within the task."""
    from engine.archive import WorkflowArchive

    asked = []
    monkeypatch.setattr(WorkflowArchive, "prepare_lookup", lambda self, task: asked.append(task.name) or False)

    def run(search, **kw):
        return evolve(examples / "discontinuous-1d", split_spec(RunSpec(search=search, iterations=0, seed=1, single_agent=False), kw),
                      runs_dir=tmp_path, out=io.StringIO(), archive_dir=tmp_path / "archive",
                      executor=FakeExecutor(tmp_path / "sandbox"), **kw)

    run("mimosa")
    assert asked == ["discontinuous-1d"]
    run("scimars")
    run("mimosa", start="team")
    assert asked == ["discontinuous-1d"]
    run("scimars", start="archive")
    assert asked == ["discontinuous-1d"] * 2
