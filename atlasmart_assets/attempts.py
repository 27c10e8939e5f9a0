"""A run's earlier attempts: the runs it re-executes (the UI's "Re-execute", from failure or all steps, and
Dagster's retries) that failed or were canceled, which may have committed before they failed (while writing their
events, say): a retry must find their commits rather than make them again, and tell their change as its own."""

from __future__ import annotations

from typing import Callable, Hashable

import dagster as dg

UNFINISHED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def earlier(instance: dg.DagsterInstance, run: dg.DagsterRun,
            meaning: Callable[[dg.DagsterRun], Hashable] | None = None) -> list[str]:
    """The ids of the runs `run` re-executes, parent first, walking back while they failed or were canceled: a run
    that succeeded settled what came before it (re-executing it is a new run). `meaning`: what a run asks for (a
    rollback's window and target); only attempts that asked for what `run` asks count (a re-execution may change
    its config, and then asks for another operation)."""
    out: list[str] = []
    wanted = meaning(run) if meaning is not None else None
    parent_id, seen = run.parent_run_id, {run.run_id}
    while parent_id is not None and parent_id not in seen:
        seen.add(parent_id)
        parent = instance.get_run_by_id(parent_id)
        if parent is None or parent.status not in UNFINISHED:
            break
        if meaning is None or meaning(parent) == wanted:
            out.append(parent.run_id)
        parent_id = parent.parent_run_id
    return out
