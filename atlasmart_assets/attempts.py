"""A run's earlier attempts: the runs of its re-execution group (the UI's "Re-execute", from failure or all steps,
and Dagster's retries) that failed or were canceled, which may have committed before they failed (while writing their
events, say): a retry must find their commits rather than make them again, and tell their change as its own."""

from __future__ import annotations

from typing import Callable, Hashable

import dagster as dg
from dagster._core.storage.tags import ROOT_RUN_ID_TAG

UNFINISHED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def earlier(instance: dg.DagsterInstance, run: dg.DagsterRun,
            meaning: Callable[[dg.DagsterRun], Hashable] | None = None) -> list[str]:
    """The ids of the runs of `run`'s re-execution group, newest first, that failed or were canceled before `run`
    was created, since its newest ancestor that succeeded (which settled what came before it: re-executing it is a
    new run). Siblings count: two re-executions of one failed run are two attempts at it. `meaning`: what a run asks
    for (a rollback's window and target); only attempts that asked for what `run` asks count (a re-execution may
    change its config, and then asks for another operation)."""
    if run.parent_run_id is None:
        return []
    # The group as run storage tags it (the UI tags every re-execution with its root's id), then the run and its
    # ancestors by their parent pointers (a re-execution made through Dagster's API carries no such tag).
    root = run.root_run_id or run.parent_run_id
    records = {r.dagster_run.run_id: r for r in instance.get_run_records(dg.RunsFilter(tags={ROOT_RUN_ID_TAG: root}))}
    chain: str | None = run.run_id
    walked: set[str] = set()
    while chain is not None and chain not in walked:
        walked.add(chain)
        if chain not in records:
            found_now = instance.get_run_records(dg.RunsFilter(run_ids=[chain]))
            if not found_now:
                break
            records[chain] = found_now[0]
        chain = records[chain].dagster_run.parent_run_id
    runs = {i: r.dagster_run for i, r in records.items()}
    created = {i: r.create_timestamp.timestamp() for i, r in records.items()}
    since, parent_id, seen = float("-inf"), run.parent_run_id, {run.run_id}
    while parent_id is not None and parent_id in runs and parent_id not in seen:
        seen.add(parent_id)
        parent = runs[parent_id]
        if parent.status == dg.DagsterRunStatus.SUCCESS:
            since = created[parent_id]
            break
        parent_id = parent.parent_run_id
    wanted = meaning(run) if meaning is not None else None
    mine = created.get(run.run_id, float("inf"))
    found = [r for r in runs.values() if r.run_id != run.run_id and r.status in UNFINISHED
             and since < created[r.run_id] < mine and (meaning is None or meaning(r) == wanted)]
    return [r.run_id for r in sorted(found, key=lambda r: created[r.run_id], reverse=True)]
