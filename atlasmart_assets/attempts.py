"""A run's earlier attempts: the runs it re-executes (the UI's "Re-execute", from failure or all steps), whose
commits a retry must find rather than make again."""

from __future__ import annotations

import dagster as dg


def earlier(instance: dg.DagsterInstance, run: dg.DagsterRun) -> list[str]:
    """The ids of the other runs of `run`'s re-execution group (none for a run that re-executes nothing)."""
    if run.parent_run_id is None:
        return []
    group = instance.get_run_group(run.run_id)
    return sorted(r.run_id for r in group[1] if r.run_id != run.run_id) if group else [run.parent_run_id]
