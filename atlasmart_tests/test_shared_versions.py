"""A version whose staged lines equal the current version's is not stored again (migration 011): its ledger row
reads the rows already stored. Readers, history, rollback and retention see every version as before."""

import datetime as dt
import json

import dagster as dg
import duckdb

from atlasmart_assets import candidates, lab
from atlasmart_assets.definitions import defs
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import publish as publish_mod
from atlasmart_assets.window import Window
from atlasmart_tests import state

DAYS = ("2026-09-18", "2026-09-19", "2026-09-20")


def _backfill(cfg, name: str = "bf-shared", logs: list[str] | None = None) -> str:
    """A ranged run of the daily job over DAYS; returns its publication id (and adds its log lines to `logs`)."""
    with dg.DagsterInstance.ephemeral() as inst:
        result = run_chain(inst, DAYS[0], DAYS[-1], {"dagster/backfill": name})
        assert result.success
        if logs is not None:
            logs += [e.user_message for e in inst.all_logs(result.run_id) if e.user_message]
    return state.table_rows(cfg, "(select publication_id, seq from audit.publications)",
                            "seq = (select max(seq) from audit.publications)")[0][0]


def _stored_days(cfg, pub: str) -> list[str]:
    """The days `pub` wrote rows for in the version store."""
    return [r[0].isoformat() for r in state.table_rows(
        cfg, "(select distinct partition_date, publication_id from versions.staged_order_lines)",
        f"publication_id = '{pub}'")]


def _stored_as(cfg, pub: str) -> dict[str, str]:
    return {r[0].isoformat(): r[1] for r in state.table_rows(
        cfg, "(select partition_date, stored_as, publication_id from audit.day_versions)",
        f"publication_id = '{pub}'")}


def _store_size(cfg) -> int:
    return state.table_rows(cfg, "(select count(*) from versions.staged_order_lines)")[0][0]


def test_a_republish_on_unchanged_evidence_writes_no_rows_and_reads_the_same(env, published, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")  # a long window: written ahead, a chunk a day
    published((DAYS[0], DAYS[-1]))
    first = state.table_rows(env, "audit.current_publications")[0][1]
    content, size = state.content(env), _store_size(env)
    holds: list[str] = []
    real = publish_mod.ledger.write_version
    monkeypatch.setattr(publish_mod.ledger, "write_version", lambda con, layer, pub, version, source, part, skip: (
        holds.append(str(part)), real(con, layer, pub, version, source, part, skip)))

    again = _backfill(env)
    assert state.content(env) == content
    assert _store_size(env) == size and _stored_days(env, again) == [], "no row was written again"
    # Only the first chunk took a hold (it records the publish in progress); it wrote nothing.
    assert holds == [DAYS[0]], holds
    assert _stored_as(env, again) == {d: first for d in DAYS}
    # The ledger records the re-publish of every day, unchanged.
    assert [r[0] for r in state.table_rows(env, "(select changed, publication_id from audit.publications)",
                                           f"publication_id = '{again}'")] == [False] * 3
    # The superseded version reads, under its own id, the same lines as the current one.
    current = state.table_rows(env, "staged.order_lines")
    history = state.table_rows(env, "history.staged_order_lines")
    assert {r[0] for r in history} == {first} and [r[1:] for r in history] == current
    assert len(state.table_rows(env, "history.fct_order_lines")) == len(current)


def test_only_the_days_whose_lines_changed_are_written(env, published, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")
    published((DAYS[0], DAYS[-1]))
    first = state.table_rows(env, "audit.current_publications")[0][1]
    shipped = state.content(env)
    lab.publish_legacy_incident(Warehouse())  # 2026-09-20 moves; the two days before do not
    logs: list[str] = []
    fix = _backfill(env, "bf-fix", logs)
    assert state.content(env) == shipped
    assert _stored_days(env, fix) == ["2026-09-20"]
    # The run's log says which chunks had nothing to write.
    chunks = [m.split("publish: ")[1].split(";")[0] for m in logs if "[4/5] publish: chunk" in m]
    assert chunks == ["chunk 1/3 (2026-09-18): no day changed, no line written",
                      "chunk 2/3 (2026-09-19): no day changed, no line written",
                      "chunk 3/3 (2026-09-20) written ahead, 1 changed day(s)"], chunks
    assert _stored_as(env, fix) == {"2026-09-18": first, "2026-09-19": first, "2026-09-20": fix}


def test_rollback_reads_a_version_stored_by_an_earlier_publication(env, instance, published) -> None:
    published((DAYS[0], DAYS[-1]))
    shipped = state.content(env)
    again = _backfill(env)  # reads the first publication's rows
    lab.publish_legacy_incident(Warehouse())
    assert state.content(env) != shipped
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance,
        run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-20", "reason": "undo the incident"}}}})
    assert result.success
    assert state.content(env) == shipped
    restored_from = state.table_rows(env, "(select restored_from, seq from audit.publications)",
                                     "seq = (select max(seq) from audit.publications)")[0][0]
    assert restored_from == again


def test_retention_never_drops_rows_a_kept_version_reads(env, published, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")
    published((DAYS[0], DAYS[-1]))
    first = state.table_rows(env, "audit.current_publications")[0][1]
    content, size = state.content(env), _store_size(env)
    for k in range(3):  # four ledger rows a day, beyond retention: every one reads the first publication's rows
        _backfill(env, f"bf-{k}")
    assert state.content(env) == content
    assert _store_size(env) == size and _stored_days(env, first) == list(DAYS)
    retained = {r[0] for r in state.table_rows(env, "history.staged_order_lines")}
    assert len(retained) == 1 and first not in retained, "history: the one version retention keeps, under its id"


def _fingerprint(con: duckdb.DuckDBPyConnection, relation: str) -> str:
    figures = candidates.controls(con, relation, Window.of("2026-09-20"), kind="staged")["2026-09-20"]
    return candidates.fingerprint(figures)


def test_a_fingerprint_tells_apart_lines_the_published_figures_do_not() -> None:
    """The fact and mart keep no order_time: only the staged lines' fingerprint sees it move."""
    con = duckdb.connect()
    t = dt.datetime(2026, 9, 20, 12)
    con.execute("create table a (partition_date date, line_id varchar, order_id varchar, customer_id varchar, "
                "country varchar, tier varchar, sku varchar, quantity integer, unit_price decimal(18, 2), "
                "unit_cost decimal(18, 2), order_time timestamp, event_time timestamp, source_sequence bigint)")
    con.executemany("insert into a values (?, ?, ?, 'C1', 'DE', 'gold', 'SKU', 1, 10, 4, ?, ?, ?)",
                    [(dt.date(2026, 9, 20), f"L{k}", f"O{k}", t, t, k) for k in range(5)])
    con.execute("create table shuffled as select * from a order by line_id desc")
    con.execute("create table moved as select * replace (case when line_id = 'L3' then order_time + interval 1 second "
                "else order_time end as order_time) from a")
    con.execute("create table swapped as select * replace (case line_id when 'L1' then 'O2' when 'L2' then 'O1' "
                "else order_id end as order_id) from a")
    assert _fingerprint(con, "a") == _fingerprint(con, "shuffled"), "a multiset: order does not count"
    assert _fingerprint(con, "a") != _fingerprint(con, "moved")
    assert _fingerprint(con, "a") != _fingerprint(con, "swapped")
    assert duckdb.__version__ in _fingerprint(con, "a")


def test_an_erasure_leaves_no_stored_row_of_the_subject_behind_a_shared_version(env, published) -> None:
    """Every day reads the first publication's rows when a deletion request arrives: applying it erases those rows
    too (no stored version holds the subject), and a re-run afterwards reads the erasing publication's rows."""
    subject = "C00004"  # has lines on each of DAYS
    published((DAYS[0], DAYS[-1]))
    _backfill(env)
    assert len(state.table_rows(env, "versions.staged_order_lines", f"customer_id = '{subject}'")) >= 3
    (env.raw_dir / "deletions").mkdir()
    (env.raw_dir / "deletions" / "DR-0001.json").write_text(json.dumps({
        "request_id": "DR-0001", "requested_at": "2026-09-25T10:00:00Z", "reason": "GDPR art. 17",
        "customer_id": subject}))
    erasing = _backfill(env, "bf-erase")
    assert state.table_rows(env, "versions.staged_order_lines", f"customer_id = '{subject}'") == []
    assert state.table_rows(env, "history.staged_order_lines", f"customer_id = '{subject}'") == []
    content = state.content(env)
    after = _backfill(env, "bf-after")
    assert state.content(env) == content and _stored_days(env, after) == []
    assert _stored_as(env, after) == {d: erasing for d in DAYS}
