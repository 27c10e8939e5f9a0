"""Rollback restores the previous publication of a range byte-identical, in one commit, recorded in the ledger."""

from atlasmart_assets import cli, lab
from atlasmart_assets.definitions import defs
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_tests import state


def _ledger(cfg, day):
    return state.table_rows(cfg, "(select partition_date, kind, publication_id, prev_publication_id, restored_from, "
                                 "sha256_before, sha256_after, seq from audit.publications)",
                            f"partition_date = '{day}'")


def test_rollback_job_restores_previous_publication_byte_identical(env, instance) -> None:
    assert run_chain(instance, "2026-09-19", "2026-09-20").success and run_chain(instance, "2026-09-21").success
    original = state.content(env)
    original_bytes = (env.published_dir / "partition=2026-09-20.json").read_bytes()
    lab.publish_legacy_incident(Warehouse())
    assert state.content(env) != original

    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance,
        run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-20", "reason": "undo the incident"}}}})

    assert result.success
    assert state.content(env) == original
    assert (env.published_dir / "partition=2026-09-20.json").read_bytes() == original_bytes
    rows = sorted(_ledger(env, "2026-09-20"), key=lambda r: r[-1])
    assert [r[1] for r in rows] == ["publish", "publish", "rollback"]
    first, incident, undo = rows
    assert undo[4] == first[2] and undo[3] == incident[2]
    assert undo[5] == incident[6] and undo[6] == first[6]


def test_repeated_rollbacks_step_back_through_history(env, instance) -> None:
    assert run_chain(instance, "2026-09-18", "2026-09-20").success
    first = state.content(env)
    lab.publish_legacy_incident(Warehouse())
    incident = state.content(env)
    assert run_chain(instance, "2026-09-20", "2026-09-20", {"dagster/backfill": "bf-fix"}).success
    fixed = state.content(env)
    assert incident != first and fixed == first  # the backfill restored cost 425: the same content as the first

    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "undo the fix"]) == 0
    assert state.content(env) == incident, "one step back: the incident's version"
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "further back"]) == 0
    assert state.content(env) == first, "a second rollback steps back again, it does not re-apply the fix"
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "nothing earlier"]) == 2
    assert state.content(env) == first

    rows = sorted(_ledger(env, "2026-09-20"), key=lambda r: r[-1])
    assert [r[1] for r in rows] == ["publish", "publish", "publish", "rollback", "rollback"]
    assert rows[3][4] == rows[1][2] and rows[4][4] == rows[0][2], "restored_from names the two earlier versions"
    # A chosen publication, however far back within retention.
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "back to the incident",
                     "--to-publication", rows[1][2]]) == 0
    assert state.content(env) == incident
    assert not list(env.scratch_dir.glob("cli-rollback-*")), "a rollback leaves no scratch behind"


def test_rollback_refuses_partitions_without_history(env, instance) -> None:
    assert run_chain(instance, "2026-09-20").success
    before = state.snapshot(env)
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "nothing to undo"]) == 2
    assert state.snapshot(env) == before
