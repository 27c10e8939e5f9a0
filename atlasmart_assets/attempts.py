"""A run's earlier attempts: the runs of its re-execution group (the UI's "Re-execute", from failure or all steps)
that did not succeed, whose commits a retry must find rather than make again, or tell as its own change."""

from __future__ import annotations

import dagster as dg

# A run that ended so may have committed before it failed (while writing its events, say): its events are missing.
UNFINISHED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def earlier(instance: dg.DagsterInstance, run: dg.DagsterRun, same_config: bool = False) -> list[str]:
    """The ids of the other runs of `run`'s re-execution group that failed or were canceled (none for a run that
    re-executes nothing); `same_config`: only those launched with `run`'s own run config (a re-execution may change
    it, and then asks for another operation)."""
    if run.parent_run_id is None:
        return []
    group = instance.get_run_group(run.run_id)
    runs = [r for r in group[1] if r.run_id != run.run_id] if group else []
    return sorted(r.run_id for r in runs if r.status in UNFINISHED
                  and (not same_config or r.run_config == run.run_config))
