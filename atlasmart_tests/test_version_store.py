"""The version store: a publish writes its rows ahead where no reader looks, its commit moves the ledger's pointers,
retention drops only superseded versions, and a warehouse of the previous release migrates with nothing lost."""

import datetime as dt
import json
from pathlib import Path

import dagster as dg
import duckdb
import pytest

from atlasmart_assets import cli, lab, sql, unchanged
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_assets.warehouse import ledger
from atlasmart_assets.warehouse import publish as publish_mod
from atlasmart_assets.warehouse.publish import collect_abandoned
from atlasmart_assets.window import Window
from atlasmart_tests import state
from bench import readers

STORES = ("versions.staged_order_lines", "versions.fct_order_lines")


def _versions_per_day(cfg, day: str) -> list[str]:
    return [r[0] for r in state.table_rows(cfg, "(select distinct publication_id, partition_date "
                                                "from versions.fct_order_lines)", f"partition_date = '{day}'")]


def _orphans(cfg) -> list[tuple]:
    return [r for store in STORES for r in state.table_rows(
        cfg, f"(select distinct publication_id from {store})",
        "publication_id not in (select publication_id from audit.publications)")]


def _store_every_version(monkeypatch) -> None:
    """Every publish builds every day and writes its own rows, unchanged days too (as before migration 011 and
    kept days): the tests of writing ahead and pruning need a version per day and publication."""
    monkeypatch.setattr(publish_mod.ledger, "reused", lambda before, after: {})
    monkeypatch.setattr(unchanged, "eligible", lambda *args: [])


def run_chain_backfill() -> bool:
    with dg.DagsterInstance.ephemeral() as inst:
        return run_chain(inst, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-version-store"}).success


def test_readers_see_the_old_version_while_rows_are_written_ahead(env, published, monkeypatch) -> None:
    """One chunk of days per transaction, the lock handed over between two and before the commit: a reader in
    any of those gaps sees exactly what was published before; the commit then shows every day at once."""
    published(("2026-09-18", "2026-09-20"))
    first = state.content(env)
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")
    _store_every_version(monkeypatch)
    seen: list[dict] = []
    monkeypatch.setattr(publish_mod, "hand_over", lambda _path: seen.append(state.content(env)))

    lab.publish_legacy_incident(Warehouse())  # 2026-09-20: one chunk, written in the commit, no hand-over
    incident = state.content(env)
    assert incident != first and seen == []

    assert run_chain_backfill()
    # 2026-09-18..20 in three chunks written ahead: two hand-overs between them and one before the commit, all
    # read as before (no day is past retention, so no prune follows the commit).
    assert len(seen) == 3 and all(s == incident for s in seen), len(seen)
    assert state.content(env) == first, "the backfill restored the shipped cost"


def test_retention_drops_superseded_versions_never_the_current_or_a_pending_one(env, published, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    published(("2026-09-18", "2026-09-20"))
    first = _versions_per_day(env, "2026-09-20")
    assert len(first) == 1
    # Rows a publish in progress wrote ahead: the ledger does not name them yet.
    with Warehouse().writer() as con:
        con.execute("insert into audit.pending_versions (publication_id, run_id, window_start, window_end) "
                    "values ('pub-in-flight', 'r-live', '2026-09-20', '2026-09-20')")
        con.execute("insert into versions.staged_order_lines select * replace ('pub-in-flight' as publication_id, "
                    "-1 as version) from versions.staged_order_lines where partition_date = '2026-09-20'")
    for _ in range(3):  # publishes that do not collect abandoned rows (a correction would: r-live is no run)
        lab.publish_legacy_incident(Warehouse())
    kept = _versions_per_day(env, "2026-09-20")
    ledger = [r[1] for r in sorted(state.table_rows(
        env, "(select seq, publication_id, partition_date from audit.publications)",
        "partition_date = '2026-09-20'"), reverse=True)]
    assert len(ledger) == 4
    assert sorted(kept) == sorted(ledger[:2] + ["pub-in-flight"]), (kept, ledger)
    assert first[0] not in kept, "a version beyond retention was dropped"
    # The published tables read the current version, whole, and history the one retained before it.
    assert len(state.table_rows(env, "fact.fct_order_lines", "partition_date = '2026-09-20'")) == 8
    assert {r[0] for r in state.table_rows(env, "history.fct_order_lines", "partition_date = '2026-09-20'")} \
        == {ledger[1]}


def test_a_long_window_prunes_after_its_commit_a_chunk_at_a_time(env, published, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_RETAIN_VERSIONS", "1")
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")
    _store_every_version(monkeypatch)
    published(("2026-09-18", "2026-09-20"))
    content = state.content(env)
    pruned: list[str] = []
    real = publish_mod.ledger.prune_versions
    monkeypatch.setattr(publish_mod.ledger, "prune_versions",
                        lambda con, retain, part: pruned.append(str(part)) or real(con, retain, part))
    assert run_chain_backfill()
    assert pruned == [], "two versions a day (the current one and one retained): nothing to prune"
    assert run_chain_backfill()
    # Three versions a day now: each day's oldest goes, one chunk (one transaction) at a time.
    assert pruned == ["2026-09-18", "2026-09-19", "2026-09-20"], pruned
    for day in ("2026-09-18", "2026-09-19", "2026-09-20"):
        assert len(_versions_per_day(env, day)) == 2, day
    assert state.content(env) == content


class _Counting:
    """A connection that counts the statements run through it."""

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con, self.statements = con, 0

    def execute(self, *args, **kwargs):
        self.statements += 1
        return self.con.execute(*args, **kwargs)


def test_erasing_earlier_versions_takes_the_same_statements_for_any_number_of_days(env, published,
                                                                                   monkeypatch) -> None:
    """It runs inside the commit's one hold: a statement per day made a year's deletion request hold the lock for
    seconds. Each erased day keeps only the erasing version (and the rows it is stored as), its earlier extracts
    say which requests erased them, and a day not erased keeps every version."""
    _store_every_version(monkeypatch)
    published(("2026-09-18", "2026-09-20"))
    assert run_chain_backfill() and run_chain_backfill()
    days = ("2026-09-18", "2026-09-19", "2026-09-20")
    versions = {day: _versions_per_day(env, day) for day in days}
    assert all(len(v) == 3 for v in versions.values()), versions
    with Warehouse().writer() as con:
        current = ledger.current(con, Window.of("2026-09-18", "2026-09-20"))
    latest = current["2026-09-20"].publication_id
    assert {c.publication_id for c in current.values()} == {latest}
    counts = []
    for erase in ({"2026-09-20": ["req-1"]}, {"2026-09-18": ["req-2"], "2026-09-19": ["req-2", "req-3"]}):
        with Warehouse().writer() as con:
            counting = _Counting(con)
            ledger.erase_earlier_versions(counting, latest, erase)  # type: ignore[arg-type]
        counts.append(counting.statements)
    assert counts[0] == counts[1], counts
    for day in days:
        assert _versions_per_day(env, day) == [latest], day
    erased = dict(state.table_rows(env, f"(select partition_date::varchar, extract_json from audit.publications "
                                        f"where publication_id <> '{latest}')"))
    assert json.loads(erased["2026-09-19"]) == {"erased": True, "by_requests": ["req-2", "req-3"]}
    assert json.loads(erased["2026-09-20"]) == {"erased": True, "by_requests": ["req-1"]}
    assert state.table_rows(env, "history.revenue_daily") == []


def test_rows_of_an_ended_run_are_collected_and_a_publish_that_lost_them_commits_nothing(
        env, published, monkeypatch) -> None:
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")  # three days: written ahead, a day per transaction
    published(("2026-09-18", "2026-09-20"))
    lab.publish_legacy_incident(Warehouse())
    before = state.snapshot(env)

    def collect_at(name: str) -> None:
        if name == "wrote_versions":  # another correction starts now and takes this run for ended
            assert collect_abandoned(Warehouse(), lambda run_id: True)

    monkeypatch.setattr(publish_mod, "failpoint", collect_at)
    with dg.DagsterInstance.ephemeral() as inst:
        result = run_chain(inst, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-collected"})
    assert not result.success
    causes = state.failure_causes(result)
    assert any("PublishConflict" in c and "taken for abandoned" in c for c in causes), causes
    assert state.snapshot(env) == before, "nothing published changed"
    assert _orphans(env) == [] and state.table_rows(env, "audit.pending_versions") == []

    # A run killed between its written-ahead rows and its commit leaves them pending; a correction collects them
    # once that run has ended, not while it runs.
    with Warehouse().writer() as con:
        con.execute("insert into audit.pending_versions (publication_id, run_id, window_start, window_end) "
                    "values ('pub-killed', 'r-killed', '2026-09-18', '2026-09-20')")
        con.execute("insert into versions.staged_order_lines select * replace ('pub-killed' as publication_id, "
                    "-2 as version) from versions.staged_order_lines")
    assert collect_abandoned(Warehouse(), lambda run_id: False) == []
    assert _orphans(env) != []
    assert collect_abandoned(Warehouse(), lambda run_id: run_id == "r-killed") == ["pub-killed"]
    assert _orphans(env) == [] and state.snapshot(env) == before


def test_a_day_republished_while_rows_are_written_ahead_stops_the_publish_before_that_day(
        env, published, monkeypatch) -> None:
    """A deletion request applied to a day by today's run erases that day's other versions, pending ones too: a
    backfill writing ahead must not write that day again afterwards (it would bring the subject back into the
    store). Each chunk checks its days against what the audit saw, in the transaction that writes them."""
    monkeypatch.setenv("ATLASMART_CHUNK_DAYS", "1")
    _store_every_version(monkeypatch)
    published(("2026-09-18", "2026-09-20"))
    handovers: list[int] = []

    def republish_2026_09_20(_path: Path) -> None:
        handovers.append(1)
        if len(handovers) == 1:  # after the backfill wrote 2026-09-18, before 2026-09-19 and -20
            lab.publish_legacy_incident(Warehouse())

    monkeypatch.setattr(publish_mod, "hand_over", republish_2026_09_20)
    written: list[tuple[str, str]] = []
    real = publish_mod.ledger.write_version
    monkeypatch.setattr(publish_mod.ledger, "write_version", lambda con, layer, pub, version, source, part, skip: (
        written.append((pub, str(part))), real(con, layer, pub, version, source, part, skip)))
    with dg.DagsterInstance.ephemeral() as inst:
        result = run_chain(inst, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-overtaken"})
    assert not result.success
    backfill = written[0][0]
    assert sorted({part for pub, part in written if pub == backfill}) == ["2026-09-18", "2026-09-19"], written
    incident = [r[0] for r in state.table_rows(env, "(select publication_id, partition_date from audit.publications)",
                                               "partition_date = '2026-09-20'")]
    # Only the publications the ledger knows have rows: the backfill's were dropped, none was written for -20.
    assert _orphans(env) == [] and state.table_rows(env, "audit.pending_versions") == []
    assert sorted({r[0] for r in state.table_rows(env, "(select distinct publication_id, partition_date "
                                                       "from versions.fct_order_lines)",
                                                  "partition_date = '2026-09-20'")}) == sorted(incident)


def _previous_release(path, without: tuple[int, ...] = (6, 7, 8, 11, 13, 14)) -> duckdb.DuckDBPyConnection:
    """A warehouse at an earlier release's schema: every migration but `without` (by default the version store's
    three, and 011, 013 and 014, which build on them)."""
    con = duckdb.connect(str(path))
    con.execute("create schema audit")
    con.execute("create table audit.schema_migrations (version integer primary key, name varchar not null, "
                "applied_at timestamp not null)")
    for number, name, body in sql.migrations():
        if number not in without:
            con.execute(body)
            con.execute("insert into audit.schema_migrations values ($n, $name, now())", {"n": number, "name": name})
    return con


def _line(day: str, k: int, cost: float) -> tuple:
    d = dt.date.fromisoformat(day)
    t = dt.datetime.combine(d, dt.time(12))
    return (d, f"{day}-L{k}", f"O{k}", "C1", "DE", "gold", "SKU", 1, 10.0, cost, t, t, k)


def test_a_warehouse_of_the_previous_release_migrates_with_nothing_lost(env, capsys) -> None:
    env.data_dir.mkdir(parents=True)
    con = _previous_release(env.warehouse_path)
    day1, day2 = "2026-09-19", "2026-09-20"
    for seq, pub, day in ((1, "pub-a", day1), (2, "pub-b", day1), (3, "pub-c", day2)):
        con.execute("insert into audit.publications (seq, publication_id, partition_date, kind, published_at, changed, "
                    "extract_json) values ($s, $p, $d, 'publish', now(), true, '{}')", {"s": seq, "p": pub, "d": day})
    staged = [_line(day1, 1, 4.0), _line(day1, 2, 5.0), _line(day2, 3, 6.0)]
    con.executemany("insert into staged.order_lines values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", staged)
    con.execute("insert into fact.fct_order_lines select partition_date, line_id, order_id, customer_id, country, tier, "
                "sku, quantity, unit_price, unit_cost, unit_price, unit_cost, unit_price - unit_cost, event_time, "
                "source_sequence from staged.order_lines")
    # pub-a's superseded day1 in history, and day2's current version copied ahead of a publish that never committed.
    for table, costlier in (("staged_order_lines", "unit_cost + 1 as unit_cost"),
                            ("fct_order_lines", "unit_cost + 1 as unit_cost, cost + 1 as cost, "
                                                "gross_profit - 1 as gross_profit")):
        source = "staged.order_lines" if table == "staged_order_lines" else "fact.fct_order_lines"
        con.execute(f"insert into history.{table} select 'pub-a', * replace ({costlier}) "
                    f"from {source} where partition_date = '{day1}'")
        con.execute(f"insert into history.{table} select 'pub-c', * from {source} where partition_date = '{day2}'")
    con.execute("insert into audit.history_precopies (partition_date, publication_id, run_id) values "
                "($d, 'pub-c', 'r-old')", {"d": day2})
    old = {t: con.execute(f"select * from {t} order by all").fetchall()
           for t in ("staged.order_lines", "fact.fct_order_lines")}
    old_history = {t: con.execute(f"select * from history.{t} where publication_id = 'pub-a' order by all").fetchall()
                   for t in ("staged_order_lines", "fct_order_lines")}
    con.close()

    assert cli.main(["migrate"]) == 0  # an operator upgrades when no load is due (else the first writer does)
    assert "applied 6, 7, 8, 11, 13, 14; schema at migration" in capsys.readouterr().out
    for table, rows in old.items():
        assert state.table_rows(env, table) == rows, table
    for table, rows in old_history.items():
        assert state.table_rows(env, f"history.{table}") == rows, "history: pub-a once, no copy of a current version"
    assert state.table_rows(env, "(select distinct publication_id, partition_date from versions.fct_order_lines)") \
        == [("pub-a", dt.date(2026, 9, 19)), ("pub-b", dt.date(2026, 9, 19)), ("pub-c", dt.date(2026, 9, 20))]
    for store in STORES:
        assert state.table_rows(env, f"(select publication_id, version from {store})", "version is null") == []
        numbers = state.table_rows(env, f"(select distinct publication_id, version from {store})")
        assert len({v for _, v in numbers}) == len(numbers), "one version number per publication"
    with duckdb.connect(str(env.warehouse_path), read_only=True) as check:
        tables = {r[0] for r in check.execute("select table_schema || '.' || table_name from information_schema.tables "
                                              "where table_type = 'BASE TABLE'").fetchall()}
    assert "audit.history_precopies" not in tables and "fact.fct_order_lines" not in tables
    assert "versions.fct_order_lines" not in tables, "the fact's versions are computed from the staged ones"


def test_the_published_fact_is_the_audited_formula_applied_to_the_published_staged_lines(env, published) -> None:
    """The fact's versions are computed by migration 008's view, the candidate's by sql/fct_order_lines.sql: one
    formula, or the published fact would not be the one audited."""
    published(("2026-09-18", "2026-09-20"))
    with duckdb.connect() as con:
        con.execute(f"attach '{env.warehouse_path}' as w (read_only)")
        con.execute("create schema candidate")
        con.execute("create view candidate.staged_order_lines as select * from w.staged.order_lines")
        audited = con.execute(f"select * from ({sql.text('fct_order_lines')}) order by all").fetchall()
        stored = con.execute("select * from w.fact.fct_order_lines order by all").fetchall()
    assert len(stored) > 20 and stored == audited


def _release_with_stored_fact(path) -> duckdb.DuckDBPyConnection:
    """A warehouse of the release before migration 008 (the fact's versions stored), one publication of two days."""
    con = _previous_release(path, without=(8, 11, 13, 14))
    con.execute("insert into audit.publications (seq, publication_id, partition_date, kind, published_at, changed, "
                "extract_json) select n, 'pub-a', d, 'publish', now(), true, '{}' from "
                "(values (1, date '2026-09-19'), (2, date '2026-09-20')) v(n, d)")
    con.execute("insert into audit.version_numbers values ('pub-a', 1)")
    for k, day in enumerate(("2026-09-19", "2026-09-19", "2026-09-20")):
        line = _line(day, k, 4.25)
        con.execute("insert into versions.staged_order_lines (publication_id, version, partition_date, line_id, "
                    "order_id, customer_id, country, tier, sku, quantity, unit_price, unit_cost, order_time, "
                    "event_time, source_sequence) values ('pub-a', 1, ?, ?, ?, ?, ?, ?, ?, 3, ?, ?, ?, ?, ?)",
                    list(line[:7]) + list(line[8:]))
    con.execute("insert into versions.fct_order_lines (publication_id, version, partition_date, line_id, order_id, "
                "customer_id, country, tier, sku, quantity, unit_price, unit_cost, gmv, cost, gross_profit, "
                "event_time, source_sequence) select publication_id, version, partition_date, line_id, order_id, "
                "customer_id, country, tier, sku, quantity, unit_price, unit_cost, quantity * unit_price, "
                "quantity * unit_cost, quantity * (unit_price - unit_cost), event_time, source_sequence "
                "from versions.staged_order_lines")
    return con


def test_the_fact_versions_become_a_view_of_the_staged_ones_with_every_row_as_it_was(env, capsys) -> None:
    env.data_dir.mkdir(parents=True)
    con = _release_with_stored_fact(env.warehouse_path)
    published = con.execute("select * from fact.fct_order_lines order by all").fetchall()
    con.close()
    assert len(published) == 3
    assert cli.main(["migrate"]) == 0
    assert "applied 8, 11, 13, 14; schema at migration" in capsys.readouterr().out
    assert state.table_rows(env, "fact.fct_order_lines") == published


@pytest.mark.parametrize("tamper", [
    "update versions.fct_order_lines set gmv = gmv + 0.01 where line_id = '2026-09-20-L2'",
    "delete from versions.fct_order_lines where line_id = '2026-09-19-L1'",
    "insert into versions.staged_order_lines select * replace ('2026-09-19-L9' as line_id) "
    "from versions.staged_order_lines where line_id = '2026-09-19-L1'",
    "update versions.fct_order_lines set version = 2 where partition_date = '2026-09-20'",
], ids=["a-value", "a-fact-row-missing", "a-staged-row-more", "another-version"])
def test_a_stored_fact_its_staged_versions_do_not_give_refuses_the_migration_and_changes_nothing(
        env, tamper) -> None:
    env.data_dir.mkdir(parents=True)
    con = _release_with_stored_fact(env.warehouse_path)
    con.execute(tamper)
    published = con.execute("select * from fact.fct_order_lines order by all").fetchall()
    con.close()
    with pytest.raises(duckdb.Error, match=r"migration 008: publication pub-a of 2026-09-(19|20) holds .+; "
                                           r"nothing was changed"):
        with Warehouse().writer():
            pass
    assert state.table_rows(env, "fact.fct_order_lines") == published
    with duckdb.connect(str(env.warehouse_path), read_only=True) as check:
        assert check.execute("select table_type from information_schema.tables where table_schema = 'versions' "
                             "and table_name = 'fct_order_lines'").fetchone() == ("BASE TABLE",)
        assert 8 not in {r[0] for r in check.execute("select version from audit.schema_migrations").fetchall()}


@pytest.mark.parametrize("days", [1, 2, 31, 400])
def test_a_window_splits_into_consecutive_chunks_that_cover_it(days) -> None:
    window = Window.of("2025-09-22", "2026-09-21")
    parts = window.split(days)
    assert [k for part in parts for k in part.keys] == window.keys
    assert all(len(part.keys) <= days for part in parts) and len(parts) == -(-len(window.keys) // days)


def test_a_version_stored_as_fact_rows_only_is_kept_and_goes_with_its_version(env, capsys) -> None:
    """Release 0.1 kept superseded fact rows and no staged ones; migration 006 moved them into the store. They
    cannot be computed from staged lines: migration 008 keeps them as they are, and they go with their version."""
    env.data_dir.mkdir(parents=True)
    con = _release_with_stored_fact(env.warehouse_path)
    con.execute("insert into audit.publications (seq, publication_id, partition_date, kind, published_at, changed, "
                "extract_json) values (0, 'pub-0', '2026-09-19', 'publish', now(), true, '{}')")
    con.execute("insert into audit.version_numbers values ('pub-0', 0)")
    con.execute("insert into versions.fct_order_lines select * replace ('pub-0' as publication_id, 0 as version, "
                "gmv + 1 as gmv) from versions.fct_order_lines where partition_date = '2026-09-19'")
    history = con.execute("select * from history.fct_order_lines order by all").fetchall()
    published = con.execute("select * from fact.fct_order_lines order by all").fetchall()
    con.close()
    assert len(history) == 2 and {r[0] for r in history} == {"pub-0"}
    assert cli.main(["migrate"]) == 0
    assert state.table_rows(env, "history.fct_order_lines") == history
    assert state.table_rows(env, "fact.fct_order_lines") == published
    with Warehouse().writer() as con:
        ledger.erase_earlier_versions(con, "pub-a", {"2026-09-19": ["req-1"]})
    assert state.table_rows(env, "history.fct_order_lines") == []
    assert state.table_rows(env, "fact.fct_order_lines") == published


def test_the_readers_bench_reads_the_published_views_of_each_warehouse(env, published, capsys) -> None:
    published(("2026-09-18", "2026-09-20"))
    readers.main([str(env.warehouse_path), str(env.warehouse_path), "--repeats", "1", "--day", "2026-09-19"])
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 + len(readers.QUERIES) and all(line.endswith(" | yes") for line in out[2:]), out
