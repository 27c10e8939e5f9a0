"""Rollback restores the previous publication of a range byte-identical, in one commit, recorded in the ledger."""

from atlasmart_assets import cli, lab
from atlasmart_assets.definitions import defs
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state


def _ledger(cfg, day):
    return state.table_rows(cfg, "(select partition_date, kind, publication_id, prev_publication_id, restored_from, "
                                 "sha256_before, sha256_after, seq from audit.publications)",
                            f"partition_date = '{day}'")


def test_rollback_job_restores_previous_publication_byte_identical(env, instance, published) -> None:
    published(("2026-09-19", "2026-09-21"))
    original = state.content(env)
    original_bytes = (env.published_dir / "partition=2026-09-20.json").read_bytes()
    lab.publish_legacy_incident(env)
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


def test_cli_rollback_undoes_the_latest_publication_of_each_partition(env, instance, published) -> None:
    published(("2026-09-18", "2026-09-20"))
    original = state.content(env)
    assert run_chain(instance, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-range"}).success
    lab.publish_legacy_incident(env)
    incident = state.content(env)
    assert cli.main(["rollback", "--from", "2026-09-20", "--to", "2026-09-20", "--reason", "undo"]) == 0
    assert state.content(env) == original
    # Undoing the range now undoes the rollback on 2026-09-20 (the incident returns) and the backfill on the
    # other two days (content equal to the first publication): one publication, every partition its own undo.
    assert cli.main(["rollback", "--from", "2026-09-18", "--to", "2026-09-20", "--reason", "undo range"]) == 0
    assert state.content(env)["extracts"] == incident["extracts"]
    kinds = state.table_rows(env, "(select publication_id, kind from audit.publications)", "kind = 'rollback'")
    assert len({r[0] for r in kinds}) == 2 and len(kinds) == 4


def test_rollback_refuses_partitions_without_history(env, published) -> None:
    published(("2026-09-20", None))
    before = state.snapshot(env)
    assert cli.main(["rollback", "--from", "2026-09-20", "--reason", "nothing to undo"]) == 2
    assert state.snapshot(env) == before
