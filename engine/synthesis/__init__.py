"""A task's first workflow: the fixed ones (fixed.py: the team, the worker-reviewer adapter, the
single agent) and the one synthesized from the library (stages.py)."""
from .fixed import EVIDENCE, WORKFLOWS, single_agent_workflow, team_workflow, worker_reviewer_workflow

__all__ = ["EVIDENCE", "WORKFLOWS", "single_agent_workflow", "team_workflow", "worker_reviewer_workflow"]
