"""A run's earlier attempts: the runs of its re-execution group (the UI's "Re-execute", from failure or all steps,
and Dagster's retries) at the failed run it re-executes, which may have committed before they failed (while writing
their events, say): a retry must find their commits rather than make them again, and tell their change as its own."""

from __future__ import annotations

from typing import Callable, Hashable

import dagster as dg
from dagster._core.storage.tags import ROOT_RUN_ID_TAG

UNFINISHED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED)


def earlier(instance: dg.DagsterInstance, run: dg.DagsterRun,
            meaning: Callable[[dg.DagsterRun], Hashable] | None = None) -> list[str]:
    """The ids of `run`'s earlier attempts, newest first: the failed or canceled run it re-executes (walking up
    through failed or canceled ancestors to the first of them) and every re-execution of that run made before
    `run`, whatever its outcome (two re-executions of one failed run are two attempts at it, and a sibling that
    succeeded may have committed what `run` must not commit again). A run whose parent succeeded has none: that one
    settled what came before it, and re-executing it is a new run. `meaning`: what a run asks for (a rollback's
    window and target); only attempts that asked for what `run` asks count (a re-execution may change its config,
    and then asks for another operation)."""
    if run.parent_run_id is None:
        return []
    records = _group(instance, run)
    runs = {i: r.dagster_run for i, r in records.items()}
    created = {i: r.create_timestamp.timestamp() for i, r in records.items()}
    first, parent_id, up = None, run.parent_run_id, {run.run_id}
    while parent_id in runs and parent_id not in up and runs[parent_id].status in UNFINISHED:
        up.add(parent_id)
        first, parent_id = parent_id, runs[parent_id].parent_run_id
    if first is None:
        return []
    wanted = meaning(run) if meaning is not None else None
    mine = created.get(run.run_id, float("inf"))
    found = [runs[i] for i in _lineage(runs, first) if i != run.run_id and created[i] < mine
             and (meaning is None or meaning(runs[i]) == wanted)]
    return [r.run_id for r in sorted(found, key=lambda r: created[r.run_id], reverse=True)]


def _group(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dict[str, dg.RunRecord]:
    """`run`'s re-execution group as run storage tags it (the UI and Dagster's retries tag every re-execution with
    its root's id), with the run and its ancestors by their parent pointers (a re-execution through Dagster's API
    carries no such tag)."""
    root = run.root_run_id or run.parent_run_id
    records = {r.dagster_run.run_id: r for r in instance.get_run_records(dg.RunsFilter(tags={ROOT_RUN_ID_TAG: root}))}
    walked: set[str] = set()
    chain: str | None = run.run_id
    while chain is not None and chain not in walked:
        walked.add(chain)
        if chain not in records:
            found = instance.get_run_records(dg.RunsFilter(run_ids=[chain]))
            if not found:
                break
            records[chain] = found[0]
        chain = records[chain].dagster_run.parent_run_id
    return records


def _lineage(runs: dict[str, dg.DagsterRun], first: str) -> set[str]:
    """`first` and every run that re-executes it, or re-executes one of those."""
    children: dict[str, list[str]] = {}
    for r in runs.values():
        if r.parent_run_id is not None:
            children.setdefault(r.parent_run_id, []).append(r.run_id)
    lineage, todo = set(), [first]
    while todo:
        one = todo.pop()
        if one not in lineage:
            lineage.add(one)
            todo.extend(children.get(one, ()))
    return lineage
