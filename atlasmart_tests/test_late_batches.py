"""New evidence for a published day: immutable landing batches (late delta, snapshot re-extraction), corrected
by a backfill of that day alone, with stale days shown before and cleared after."""

import datetime as dt
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from atlasmart_assets import cli, evidence, extracts, generate, notices
from atlasmart_assets.assets import day_metadata
from atlasmart_assets.contract import RANGE_END_TAG, RANGE_START_TAG
from atlasmart_assets.lab import run_chain
from atlasmart_assets.resources import Warehouse
from atlasmart_tests import retries, state

DAY = "2026-09-18"
BF = {"dagster/backfill": "bf-late", "atlasmart/reason": "late batch from the OMS"}


def _publish_history(published) -> None:  # noqa: ANN001
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))


def _stale(capsys) -> list[dict]:  # noqa: ANN001
    capsys.readouterr()
    assert cli.main(["stale", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _ledger(cfg, day: str) -> list[tuple]:  # noqa: ANN001
    return state.table_rows(cfg, "(select partition_date::varchar as d, seq, kind, backfill_id, input_batches, as_of "
                                 "from audit.publications)", f"d = '{day}'")


def test_a_late_delta_is_corrected_by_a_backfill_of_that_day_alone(env, instance, published, capsys) -> None:
    _publish_history(published)
    assert _stale(capsys) == [], "nothing is stale before new evidence arrives"
    before = state.files(env.published_dir)
    path = generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02", new=2, restate=1, retract=1)
    manifest = json.loads(path.read_text())["manifest"]

    stale = _stale(capsys)
    assert [s["partition"] for s in stale] == [DAY], "exactly the day with a new batch is stale"
    assert stale[0]["reasons"] == ["new batch B-2026-09-18-02"]

    result = run_chain(instance, DAY, DAY, BF)
    assert result.success, state.failure_text(result)
    doc = extracts.read(env, DAY)
    expected = [manifest["controls"][c] for c in extracts.CONTROL_NAMES]
    assert doc["controls"] == expected, "published controls equal the latest batch's"
    oracle = evidence.merge(generate.read_batches(env.raw_dir, dt.date.fromisoformat(DAY)))
    fact_ids = {r[1] for r in state.table_rows(env, "fact.fct_order_lines", f"partition_date = '{DAY}'")}
    assert fact_ids == set(oracle), "the fact holds exactly the merged evidence's line ids"
    assert [b["batch"] for b in doc["input"]["batches"]] == ["B-2026-09-18-01", "B-2026-09-18-02"]
    assert doc["input"]["as_of"] == manifest["extracted_at"]
    after = state.files(env.published_dir)
    assert {k: v for k, v in after.items() if DAY not in k} == {k: v for k, v in before.items() if DAY not in k}, \
        "neighbours and the newest day are byte-identical"
    rows = _ledger(env, DAY)
    assert rows[-1][3] == "bf-late" and "B-2026-09-18-02" in rows[-1][4] and rows[-1][5] == manifest["extracted_at"]
    assert _stale(capsys) == [], "the backfill cleared the stale day"
    notice = (env.notices_dir / "bf-late.md").read_text()
    assert "B-2026-09-18-02" in notice and "— added" in notice, "the notice says which batch the correction added"

    content = state.content(env)
    assert run_chain(instance, DAY, DAY, {**BF, "dagster/backfill": "bf-late-again"}).success
    assert state.content(env) == content, "a re-run with the same batches changes nothing"
    assert extracts.read(env, DAY)["sha256"] == doc["sha256"]


def test_a_snapshot_retracts_what_it_leaves_out_and_a_big_shrink_is_a_decision(env, instance, published, capsys) -> None:
    _publish_history(published)
    day = dt.date.fromisoformat(DAY)
    rows_before = extracts.read(env, DAY)["controls"][0]
    generate.late_snapshot(env.raw_dir, day, "B-2026-09-18-S1", drop=4)  # 12 -> 8 lines: a 33 % shrink
    before = state.snapshot(env)
    refused = run_chain(instance, DAY, DAY, BF)
    assert not refused.success and "atlasmart/accept_shrink" in state.failure_text(refused)
    assert state.snapshot(env) == before, "a refused shrink moves nothing"

    accepted = run_chain(instance, DAY, DAY, {**BF, "atlasmart/accept_shrink": "source purged 4 test orders"})
    assert accepted.success, state.failure_text(accepted)
    assert extracts.read(env, DAY)["controls"][0] == rows_before - 4
    oracle = evidence.merge(generate.read_batches(env.raw_dir, day))
    assert len(oracle) == rows_before - 4
    [row] = state.table_rows(env, "(select partition_date::varchar as d, accept_shrink, seq from audit.publications)",
                             f"d = '{DAY}' and accept_shrink is not null")
    assert row[1] == "source purged 4 test orders", "the decision is recorded in the ledger"


def test_a_tie_between_batches_is_refused_naming_both_files(env, instance, published) -> None:
    _publish_history(published)
    day = dt.date.fromisoformat(DAY)
    first = json.loads((env.raw_dir / f"partition={DAY}.json").read_text())["lines"][0]
    path = generate.write_batch(env.raw_dir, day, "B-2026-09-18-T", [{**first, "unit_price": first["unit_price"] + 1}])
    before = state.snapshot(env)
    result = run_chain(instance, DAY, DAY, BF)
    text = state.failure_text(result)
    assert not result.success and "raw_order_lines_merge_deterministic" in text
    assert str(path) in text and f"partition={DAY}.json" in text, text
    assert state.snapshot(env) == before


def test_batches_tied_on_source_high_sequence_are_refused_only_when_their_controls_differ(env, instance,
                                                                                          published) -> None:
    """Which batch a day reconciles to is the one with the highest source_high_sequence. A re-extraction at the same
    sequence and the same controls is the same state (published); with other controls the day's latest batch is
    ambiguous, refused naming both (the raw check and the controls audit picked different ones: a review)."""
    _publish_history(published)
    doc = json.loads((env.raw_dir / f"partition={DAY}.json").read_text())

    def tied(batch: str, units: int = 0) -> Path:
        manifest = {**doc["manifest"], "extraction_batch": batch,
                    "controls": {**doc["manifest"]["controls"], "units": doc["manifest"]["controls"]["units"] + units}}
        path = env.raw_dir / f"partition={DAY}" / f"{batch}.json"
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps({"manifest": manifest, "lines": doc["lines"]}))
        return path

    tied("B-2026-09-18-same")
    result = run_chain(instance, DAY, DAY, BF)
    assert result.success, state.failure_text(result)
    before = state.snapshot(env)
    path = tied("B-2026-09-18-other", units=1)
    result = run_chain(instance, DAY, DAY, {**BF, "dagster/backfill": "bf-tied"})
    text = state.failure_text(result)
    assert not result.success and "ambiguous" in text and str(path) in text and "B-2026-09-18-01" in text, text
    assert state.snapshot(env) == before


@pytest.mark.parametrize("tamper", ["change", "delete"])
def test_a_changed_or_vanished_batch_is_refused(env, instance, published, tamper) -> None:
    _publish_history(published)
    path = generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02")
    assert run_chain(instance, DAY, DAY, BF).success
    before = state.snapshot(env)
    if tamper == "change":
        path.write_text(path.read_text().replace('"records"', ' "records"'))
    else:
        path.unlink()
    result = run_chain(instance, DAY, DAY, {**BF, "dagster/backfill": "bf-tampered"})
    text = state.failure_text(result)
    assert not result.success and "raw_order_lines_sha256_unchanged" in text
    assert ("never rewritten in place" if tamper == "change" else "has vanished") in text, text
    assert state.snapshot(env) == before


def test_the_current_lane_picks_up_a_new_batch_for_the_newest_day(env, instance, published) -> None:
    _publish_history(published)
    newest = "2026-09-21"
    path = generate.late_delta(env.raw_dir, dt.date.fromisoformat(newest), "B-2026-09-21-02", new=1, restate=0,
                               retract=0)
    assert run_chain(instance, newest).success
    manifest = json.loads(path.read_text())["manifest"]
    assert extracts.read(env, newest)["controls"] == [manifest["controls"][c] for c in extracts.CONTROL_NAMES]


def _observed_versions(instance) -> dict[str, str]:  # noqa: ANN001
    from atlasmart_assets.definitions import defs

    result = defs.resolve_job_def("observe_landing_batches").execute_in_process(instance=instance)
    assert result.success
    return {e.partition: e.event_specific_data.asset_observation.tags["dagster/data_version"]
            for e in result.get_asset_observation_events()}


def test_the_ui_sees_a_new_batch_as_a_new_data_version_of_that_day_only(env, instance, published) -> None:
    from atlasmart_assets.assets.raw import observed_versions

    before = _observed_versions(instance)
    assert DAY in before and "2026-09-21" in before
    assert _observed_versions(instance) == {}, "nothing new on disk: no observation (the event log stays small)"
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02")
    after = _observed_versions(instance)
    assert list(after) == [DAY] and after[DAY] != before[DAY], "only the day with a new batch is observed again"
    latest = observed_versions(instance, dg.AssetKey(["raw", "landing_batches"]), set(before))
    assert latest == {**before, DAY: after[DAY]}, "every other day keeps its last observed version"


def test_observed_versions_read_one_page_then_one_record_per_day_missing_from_it(env, instance, monkeypatch) -> None:
    """The latest observation of a day observed long ago is found behind newer ones, and a day never observed costs
    one query of at most one record: never a pass over the observation history."""
    from atlasmart_assets.assets import raw

    first = _observed_versions(instance)
    monkeypatch.setattr(raw, "PAGE", 2)
    for k in range(3):
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), f"B-2026-09-18-0{k + 2}")
        assert list(_observed_versions(instance)) == [DAY]
    calls: list[tuple] = []
    real = instance.fetch_observations

    def counting(records_filter, limit, cursor=None, ascending=False):  # noqa: ANN001, ANN202
        calls.append((records_filter.asset_partitions, limit, cursor))
        return real(records_filter, limit, cursor, ascending)

    monkeypatch.setattr(instance, "fetch_observations", counting)
    wanted = set(first) | {"2026-10-01"}  # a day never observed
    latest = raw.observed_versions(instance, dg.AssetKey(["raw", "landing_batches"]), wanted)
    assert set(latest) == set(first) and latest[DAY] != first[DAY]
    assert all(latest[d] == first[d] for d in first if d != DAY)
    assert calls[0] == (None, 2, None), "the newest page (it held only the day observed again)"
    assert sorted(c[0][0] for c in calls[1:]) == sorted(wanted - {DAY}) and all(c[1:] == (1, None) for c in calls[1:])


@pytest.mark.parametrize("seed", range(6))
def test_the_merge_sql_equals_the_python_rules_on_random_batch_sets(seed: int) -> None:
    """merge_losers.sql and merged_lines.sql (the lines held by several records ranked; retraction by snapshot only
    on days with several batches) against evidence.merge on random days: one batch or several, repeats inside a
    batch, retractions, snapshots that drop lines."""
    import random

    import duckdb

    from atlasmart_assets import candidates

    rng = random.Random(seed)
    con = duckdb.connect()
    con.execute("create schema candidate")
    con.execute("create table candidate.raw_lines (partition_date date, extraction_batch varchar, op varchar, "
                "line_id varchar, order_id varchar, source_sequence bigint)")
    con.execute("create table candidate.raw_batches (partition_date date, batch_id varchar, kind varchar, "
                "source_high_sequence bigint)")
    expected: dict[str, set[tuple[str, int]]] = {}
    for d in range(8):
        day = f"2026-09-{d + 1:02d}"
        sequences = iter(rng.sample(range(1, 10_000), 400))
        batches = []
        for b in range(rng.choice([1, 1, 2, 3, 4])):
            kind = "snapshot" if b == 0 else rng.choice(["delta", "delta", "snapshot"])
            lines = [{"line_id": f"L{rng.randrange(40)}", "source_sequence": next(sequences),
                      "op": "delete" if b and rng.random() < 0.15 else "upsert"} for _ in range(rng.randrange(1, 30))]
            high = max(line["source_sequence"] for line in lines) + rng.choice([0, 5000])
            batches.append(evidence.Batch(f"B{b}", kind, high, lines))
        for batch in sorted(batches, key=lambda x: x.source_high_sequence):
            con.execute("insert into candidate.raw_batches values (?, ?, ?, ?)",
                        [day, batch.batch_id, batch.kind, batch.source_high_sequence])
            con.executemany("insert into candidate.raw_lines values (?, ?, ?, ?, ?, ?)",
                            [[day, batch.batch_id, line["op"], line["line_id"], "O", line["source_sequence"]]
                             for line in batch.lines])
        expected[day] = {(k, v["source_sequence"]) for k, v in evidence.merge(
            sorted(batches, key=lambda x: x.source_high_sequence)).items()}
    got: dict[str, set[tuple[str, int]]] = {day: set() for day in expected}
    candidates.merge_evidence(con)
    for day, line_id, sequence in con.execute(
            "select partition_date::varchar, line_id, source_sequence from candidate.merged_lines").fetchall():
        got[day].add((line_id, sequence))
    assert got == expected


@pytest.mark.parametrize("seed", range(6))
def test_the_merge_conflicts_sql_finds_exactly_the_keys_whose_records_differ(seed: int) -> None:
    """merge_conflicts.sql (over the repeated keys repeated_lines.sql finds by their hash) against the rule it
    states, on random days: a line_id and source_sequence held by several records of a day (in one batch or across
    batches) is a conflict when their content differs (a null differs from a value, wherever it stands), and not
    when it repeats; records without a day, a line_id or a sequence are never compared."""
    import random

    import duckdb

    from atlasmart_assets import sql

    rng = random.Random(seed)
    con = duckdb.connect()
    con.execute("create schema candidate")
    content = ("op", "order_id", "customer_id", "sku", "quantity", "unit_price", "unit_cost", "event_time")
    con.execute("create table candidate.raw_lines (partition_date date, extraction_batch varchar, line_id varchar, "
                f"source_sequence bigint, {', '.join(f'{c} varchar' for c in content)})")
    rows = []
    for d in range(7):
        day = f"2026-09-{d + 1:02d}" if d < 6 else None
        for b in range(rng.choice([1, 2, 3])):
            for _ in range(rng.randrange(1, 40)):
                line_id = rng.choice([None, *(f"L{k}" for k in range(12))]) if rng.random() < 0.9 else None
                sequence = rng.choice([None, *range(1, 15)]) if rng.random() < 0.95 else None
                values = [rng.choice(["upsert", "delete"]), *(rng.choice(["a", "b", None]) for _ in content[1:])]
                rows.append([day, f"B{b}", line_id, sequence, *values])
    blank = [None] * (len(content) - 3)
    rows += [  # the same text once nulls are skipped, but different records; and a repeat without a day
        ["2026-09-01", "B0", "L-shift", 7, "upsert", "a", None, *blank],
        ["2026-09-01", "B1", "L-shift", 7, "upsert", None, "a", *blank],
        [None, "B0", "L-nodate", 7, "upsert", "a", *blank, None],
        [None, "B1", "L-nodate", 7, "upsert", "b", *blank, None],
    ]
    con.executemany(f"insert into candidate.raw_lines values ({', '.join('?' * (4 + len(content)))})", rows)

    held: dict[tuple[str, str, int], list[tuple[str, tuple[str | None, ...]]]] = {}
    for day, batch, line_id, sequence, *values in rows:
        if day is not None and line_id is not None and sequence is not None:
            held.setdefault((day, line_id, sequence), []).append((batch, tuple(values)))
    expected = {key: sorted({b for b, _ in recs}) for key, recs in held.items()
                if len(recs) > 1 and len({content for _, content in recs}) > 1}
    con.execute(f"create table candidate.repeated_lines as {sql.text('repeated_lines')}")
    got = {(day, line_id, sequence): list(batches) for day, line_id, sequence, batches in con.execute(
        f"select partition_date::varchar, line_id, source_sequence, batches from ({sql.text('merge_conflicts')})"
    ).fetchall()}
    assert expected, "the random days hold no conflict: the test would prove nothing"
    assert got == expected


def test_the_merge_replaces_merged_lines_an_earlier_release_wrote_as_a_table() -> None:
    """A step retried across an upgrade finds the run's scratch as the earlier release left it, where the merged
    lines were a table: the merge replaces it with the view instead of failing."""
    import duckdb

    from atlasmart_assets import candidates

    con = duckdb.connect()
    con.execute("create schema candidate")
    con.execute("create table candidate.raw_lines as select date '2026-09-01' as partition_date, 'B' as "
                "extraction_batch, 'upsert' as op, 'L1' as line_id, 1 as source_sequence")
    con.execute("create table candidate.raw_batches as select date '2026-09-01' as partition_date, 'B' as batch_id, "
                "'snapshot' as kind, 1 as source_high_sequence")
    con.execute("create table candidate.merged_lines as select * from candidate.raw_lines where false")
    candidates.merge_evidence(con)
    assert con.execute("select table_type from information_schema.tables where table_name = 'merged_lines'"
                       ).fetchone()[0] == "VIEW"
    assert con.execute("select line_id from candidate.merged_lines").fetchall() == [("L1",)]


def test_a_late_batch_that_changes_lines_but_no_figure_is_told_as_a_change_of_the_fact(env, instance, published,
                                                                                     capsys) -> None:
    """A restated line with another sku: the fact's rows change, its controls, the mart and the extract's content do
    not. The fact's event says the day changed and the notice names it (a review found `changed: False` and
    "content changed: none" alone, though the fact's rows differ)."""
    _publish_history(published)
    day = dt.date.fromisoformat(DAY)
    lines = json.loads((env.raw_dir / f"partition={DAY}.json").read_text())["lines"]
    line = lines[0]
    restated = {**line, "sku": line["sku"] + "-X", "source_sequence": max(x["source_sequence"] for x in lines) + 1}
    generate.write_batch(env.raw_dir, day, "B-2026-09-18-02", [restated])
    fact_before = state.table_rows(env, "fact.fct_order_lines", f"partition_date = '{DAY}'")
    sha_before = extracts.read(env, DAY)["sha256"]
    result = run_chain(instance, "2026-09-17", "2026-09-20", BF)
    assert result.success, state.failure_text(result)
    assert state.table_rows(env, "fact.fct_order_lines", f"partition_date = '{DAY}'") != fact_before
    assert extracts.read(env, DAY)["sha256"] == sha_before, "the extract's content is the same"
    for d in ("2026-09-17", "2026-09-18", "2026-09-19", "2026-09-20"):
        record = state.latest(instance, "fact/fct_order_lines", d)
        assert record.run_id == result.run_id
        assert record.asset_materialization.metadata["changed"].value == (d == DAY), d
    meta = state.latest(instance, "fact/fct_order_lines", "2026-09-20").asset_materialization.metadata
    assert meta["changed_partitions"].value == 0 and meta["lines_changed_partitions"].value == 1, meta
    notice = (env.notices_dir / "bf-late.md").read_text()
    assert f"lines changed, content the same: {DAY}" in notice, notice
    # Rolled back, the fact's rows change back: its event says so too.
    from atlasmart_assets.definitions import defs

    back = defs.resolve_job_def("rollback_job").execute_in_process(instance=instance, run_config={"ops": {
        "rollback_range": {"config": {"start": DAY, "reason": "the sku was right"}}}})
    assert back.success and state.table_rows(env, "fact.fct_order_lines", f"partition_date = '{DAY}'") == fact_before
    record = state.latest(instance, "fact/fct_order_lines", DAY)
    assert record.run_id == back.run_id and record.asset_materialization.metadata["changed"].value is True


def _daily_job() -> dg.JobDefinition:
    from atlasmart_assets.definitions import defs

    return defs.resolve_job_def("atlasmart_daily")


def _daily(inst: dg.DagsterInstance, tags: dict[str, str], parent: str | None = None,
           whole: bool = False) -> Any:
    """A run of the daily job through Dagster's API, as the UI's re-executions are made; given `parent`, its
    re-execution (from failure, or `whole`: every step)."""
    options = None if parent is None else (dg.ReexecutionOptions(parent_run_id=parent) if whole else
                                           dg.ReexecutionOptions.from_failure(parent, inst))
    return dg.execute_job(dg.reconstructable(_daily_job), inst, tags=tags, raise_on_error=False,
                          reexecution_options=options)


def test_a_retried_correction_that_committed_before_it_failed_tells_the_change_it_made(env, published,
                                                                                       monkeypatch) -> None:
    """A correction commits, then fails writing its events; its retry publishes the same content again. Its events
    tell the change from before the first attempt, not "unchanged" from what the first attempt published (a review
    found every day `changed: False` and no change chart, beside a notice naming the change)."""
    _publish_history(published)
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02", new=2, restate=1, retract=1)
    failed = retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {**BF, RANGE_START_TAG: "2026-09-17", RANGE_END_TAG: "2026-09-19"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success and failed
        sha_first = extracts.read(env, DAY)["sha256"]
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        assert extracts.read(env, DAY)["sha256"] == sha_first
        for d in ("2026-09-17", "2026-09-18", "2026-09-19"):
            record = state.latest(inst, "fact/fct_order_lines", d)
            assert record.run_id == retry.run_id
            assert record.asset_materialization.metadata["changed"].value == (d == DAY), d
        meta = state.latest(inst, "mart/revenue_daily", "2026-09-19").asset_materialization.metadata
        assert meta["changed_partitions"].value == 1 and "change_chart" in meta, meta


def test_a_retried_correction_whose_first_attempt_repaired_a_day_tells_it_repaired(env, published,
                                                                                    monkeypatch) -> None:
    """A correction writes afresh a day whose published rows had changed behind its ledger, commits, then fails
    writing its events; on the retry the day matches its ledger and is kept. The retry's events still tell it
    repaired, as the ledger, the notice and Slack do (a review found `changed: False` and no `repaired`)."""
    _publish_history(published)
    with Warehouse().writer() as con:
        con.execute("update versions.staged_order_lines set quantity = quantity + 1 where rowid = "
                    f"(select min(rowid) from versions.staged_order_lines where partition_date = '{DAY}')")
    retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {**BF, "dagster/backfill": "bf-repair", RANGE_START_TAG: "2026-09-17", RANGE_END_TAG: "2026-09-19"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        for d in ("2026-09-17", DAY, "2026-09-19"):
            meta = state.latest(inst, "fact/fct_order_lines", d).asset_materialization.metadata
            assert ("repaired" in meta) == (d == DAY) and meta["changed"].value == (d == DAY), (d, meta)
        newest = state.latest(inst, "fact/fct_order_lines", "2026-09-19").asset_materialization.metadata
        assert newest["repaired_partitions"].value == 1, newest
    assert "; repaired: 2026-09-18 (" in (env.notices_dir / "bf-repair.md").read_text()


# Re-executions a review found telling another run's change as their own, or linking a notice that says otherwise.

def _current(env, day: str):  # noqa: ANN001, ANN202
    return state.table_rows(env, "(select partition_date::varchar as d, publication_id, prev_publication_id, "
                                 "restored_from, run_id from audit.current_publications)", f"d = '{day}'")[0][1:]


def test_a_retry_after_another_run_published_the_day_tells_only_its_own_change(env, published, monkeypatch) -> None:
    """R0 commits a late batch, fails writing its events; another run S publishes the day since; R0's retry
    builds S's content again: it changed nothing readers see, and says so (a review found it told the change from
    before R0, skipping S's version: the walk back stops at a version another run published)."""
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
    day = dt.date.fromisoformat(DAY)
    generate.late_delta(env.raw_dir, day, "B-2026-09-18-02", new=2, restate=1, retract=1)
    retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {"dagster/backfill": "bf-r", RANGE_START_TAG: DAY, RANGE_END_TAG: DAY}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        pub_r0 = _current(env, DAY)[0]
        # Another run publishes the day with one more late batch.
        generate.late_delta(env.raw_dir, day, "B-2026-09-18-03", new=1, restate=0, retract=0, seed=5)
        other = run_chain(inst, DAY, DAY, {"dagster/backfill": "bf-other"})
        assert other.success, state.failure_text(other)
        pub_s, prev_s = _current(env, DAY)[:2]
        assert prev_s == pub_r0
        sha_s = extracts.read(env, DAY)["sha256"]
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        pub_r1, prev_r1 = _current(env, DAY)[:2]
        assert prev_r1 == pub_s and extracts.read(env, DAY)["sha256"] == sha_s, "R1 republished S's content"
        record = state.latest(inst, "fact/fct_order_lines", DAY)
        run_id, meta = record.run_id, record.asset_materialization.metadata
        assert run_id == retry.run_id
        controls = meta["controls"].value
        assert meta["changed"].value is False, (meta["changed"].value, controls)


def test_a_retried_single_run_links_the_notice_of_the_change_its_events_tell(env, published, monkeypatch) -> None:
    """A single-partition correction (no backfill: its notice is its publication's) commits, fails writing its
    events, and is re-executed: the retry's events tell the change, and so does the notice they link, its own,
    covering the first attempt's publication (a review found it saying "content changed: none")."""
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02", new=2, restate=1, retract=1)
    retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {"dagster/partition": DAY, "atlasmart/reason": "late"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        fact = state.latest(inst, "fact/fct_order_lines", DAY).asset_materialization.metadata
        mart = state.latest(inst, "mart/revenue_daily", DAY).asset_materialization.metadata
        notice = open(mart["change_notice"].value).read()
        assert fact["changed"].value is True and mart["changed_partitions"].value == 1
        assert f"content changed: {DAY}" in notice, notice


def test_a_re_executed_successful_correction_tells_only_its_own_change(
        env, published) -> None:
    """A correction that succeeded, re-executed later ("Re-execute all") after new evidence for another day:
    only failed or canceled attempts are walked back through, so its events tell its own change alone (a review
    found the first run's change told again as the re-execution's)."""
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02", new=2, restate=1, retract=1)
    tags = {"dagster/backfill": "bf-s", RANGE_START_TAG: "2026-09-17", RANGE_END_TAG: "2026-09-19"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert first.success
        meta0 = state.latest(inst, "fact/fct_order_lines", DAY).asset_materialization.metadata
        assert meta0["changed"].value is True
        generate.late_delta(env.raw_dir, dt.date.fromisoformat("2026-09-19"), "B-2026-09-19-02", new=1, restate=0,
                            retract=0)
        again = _daily(inst, tags, first.run_id, whole=True)
        assert again.success, again
        record = state.latest(inst, "fact/fct_order_lines", DAY)
        run_id, meta = record.run_id, record.asset_materialization.metadata
        assert run_id == again.run_id
        newest = state.latest(inst, "mart/revenue_daily", "2026-09-19").asset_materialization.metadata
        assert (meta["changed"].value, newest["changed_partitions"].value) == (False, 1), (
            meta["changed"].value, newest["changed_partitions"].value)


# Re-executions' notices, which a review found missing or telling another change than the events.

def _days_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("- Days republished"))


def _history(published, env) -> None:  # noqa: ANN001
    published(("2026-09-17", "2026-09-20"), ("2026-09-21", None))
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02", new=2, restate=1, retract=1)


def test_a_backfill_run_re_executed_without_its_backfill_tag_links_a_notice_of_its_change(env, published, monkeypatch) -> None:
    """Dagster drops `dagster/backfill` from a run re-executed once its backfill is over (the UI's "Re-execute",
    the auto-retry daemon): the retry has no backfill id, and its own notice covers its earlier attempts'
    publications, telling the change its events tell (a review found no notice linked)."""
    _history(published, env)
    retries.fail_once(monkeypatch, day_metadata, "fact")
    window = {RANGE_START_TAG: "2026-09-17", RANGE_END_TAG: "2026-09-19"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, {"dagster/backfill": "bf-x", "atlasmart/reason": "late", **window})
        assert not first.success
        assert notices.notice_path(env, "bf-x").exists()
        # The parent's tags, less dagster/backfill.
        retry = _daily(inst, {"atlasmart/reason": "late", **window}, first.run_id)
        assert retry.success
        fact = state.latest(inst, "fact/fct_order_lines", DAY).asset_materialization.metadata
        mart = state.latest(inst, "mart/revenue_daily", "2026-09-19").asset_materialization.metadata
        assert fact["changed"].value is True and mart["changed_partitions"].value == 1
        own = notices.notice_path(env, mart["publication_id"].value)
        assert mart["change_notice"].value == str(own), (sorted(mart), own.exists() and _days_line(own.read_text()))
        assert f"content changed: {DAY}" in own.read_text()


def test_a_retry_whose_first_attempt_wrote_no_notice_writes_one_telling_the_change(env, published, monkeypatch) -> None:
    """The first attempt commits and fails before writing its notice: the retry's notice tells the change its
    events tell (a review found none anywhere)."""
    _history(published, env)
    retries.fail_once(monkeypatch, notices, "write")
    tags = {"dagster/partition": DAY, "atlasmart/reason": "late"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        retry = _daily(inst, tags, first.run_id)
        assert retry.success
        fact = state.latest(inst, "fact/fct_order_lines", DAY).asset_materialization.metadata
        mart = state.latest(inst, "mart/revenue_daily", DAY).asset_materialization.metadata
        assert fact["changed"].value is True and mart["changed_partitions"].value == 1
        texts = {p.name: p.read_text() for p in env.notices_dir.glob("*.md")}
        telling = [n for n, t in texts.items() if f"content changed: {DAY}" in t]
        assert "change_notice" in mart and telling, (sorted(mart), {n: _days_line(t) for n, t in texts.items()})


def test_a_re_executed_run_with_new_evidence_links_a_notice_of_what_readers_see(env, published, monkeypatch) -> None:
    """A1 commits batch 02 and fails; batch 03 lands; A2 ("Re-execute all") publishes 02+03: the notice its events
    link tells the change from before A1 to what readers see now (a review found A1's notice linked)."""
    _history(published, env)
    retries.fail_once(monkeypatch, day_metadata, "fact")
    tags = {"dagster/partition": DAY, "atlasmart/reason": "late"}
    with dg.instance_for_test() as inst:
        first = _daily(inst, tags)
        assert not first.success
        generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-03", new=1, restate=0,
                            retract=0, seed=7)
        again = _daily(inst, tags, first.run_id, whole=True)
        assert again.success
        pub_now = _current(env, DAY)[0]
        sha_now = extracts.read(env, DAY)["sha256"]
        mart = state.latest(inst, "mart/revenue_daily", DAY).asset_materialization.metadata
        fact = state.latest(inst, "fact/fct_order_lines", DAY).asset_materialization.metadata
        assert mart["publication_id"].value == pub_now and fact["changed"].value is True
        text = open(mart["change_notice"].value).read()
        assert pub_now in text, (pub_now, sha_now[:12], text.split("\n")[:16])


def test_a_late_batch_of_an_older_extraction_is_not_stale_once_published(env, instance, published, capsys) -> None:
    """An older extraction delivered late (its source_high_sequence below the first batch's): its record loses the
    merge, and once a backfill publishes the day it is not stale. A review found it stale for good ("first batch
    … changed", "batch B-…-01 vanished"): the ledger lists batches by sequence, and stale matched them by position."""
    _publish_history(published)
    first = json.loads((env.raw_dir / f"partition={DAY}.json").read_text())
    line = first["lines"][0]
    older = {**line, "unit_price": line["unit_price"] + 1, "source_sequence": line["source_sequence"] - 1}
    folder = env.raw_dir / f"partition={DAY}"
    folder.mkdir()
    manifest = {**first["manifest"], "extraction_batch": "B-2026-09-18-00", "kind": "delta",
                "extracted_at": "2026-09-19T00:30:00Z", "source_high_sequence": older["source_sequence"],
                "records": 1}
    (folder / "B-2026-09-18-00.json").write_text(json.dumps({"manifest": manifest, "lines": [older]}))
    assert [s["reasons"] for s in _stale(capsys)] == [["new batch B-2026-09-18-00"]]
    result = run_chain(instance, DAY, DAY, BF)
    assert result.success, state.failure_text(result)
    assert {b["batch"] for b in extracts.read(env, DAY)["input"]["batches"]} == {"B-2026-09-18-00", "B-2026-09-18-01"}
    assert _stale(capsys) == [], "the backfill read every batch on disk: the day is no longer stale"
    (folder / "B-2026-09-18-00.json").unlink()
    assert [s["reasons"] for s in _stale(capsys)] == [["batch B-2026-09-18-00 vanished"]]


def test_stale_matches_batches_by_id_whatever_their_order_in_the_ledger(tmp_path) -> None:  # noqa: ANN001
    """The first file changed or vanished, a later batch vanished: each told once, by name, whichever order the
    ledger lists the batches in (by source sequence: a late batch of an older extraction comes first)."""
    from atlasmart_assets import raw_files, stale

    def write(path, batch: str) -> dict:  # noqa: ANN001
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"manifest": {"extraction_batch": batch}, "lines": []}))
        return {"batch": batch, "sha256": raw_files.sha256_of(path)}

    first = write(tmp_path / f"partition={DAY}.json", "B-01")
    older = write(tmp_path / f"partition={DAY}" / "B-00.json", "B-00")
    later = write(tmp_path / f"partition={DAY}" / "B-02.json", "B-02")
    for published in ([first, older, later], [older, first, later], [older, later, first]):
        assert stale._reasons(tmp_path, DAY, published) == ([], [])
    (tmp_path / f"partition={DAY}.json").write_text(json.dumps({"manifest": {"extraction_batch": "B-01"}, "x": 1}))
    (tmp_path / f"partition={DAY}" / "B-02.json").unlink()
    assert stale._reasons(tmp_path, DAY, [older, first, later]) == (
        [f"first batch partition={DAY}.json changed since publication", "batch B-02 vanished"], [])
    (tmp_path / f"partition={DAY}.json").unlink()
    assert stale._reasons(tmp_path, DAY, [older, first, later]) == (
        [f"first batch partition={DAY}.json vanished", "batch B-02 vanished"], [])


def test_a_late_batch_without_extracted_at_is_refused_naming_it(env, instance, published) -> None:
    """A later batch whose manifest has no extracted_at is refused, naming the file, and nothing changes. A review
    found it loaded and the day published with input.as_of null, so consumers could not tell what they read."""
    _publish_history(published)
    path = generate.late_delta(env.raw_dir, dt.date.fromisoformat(DAY), "B-2026-09-18-02", new=1, restate=0, retract=0)
    doc = json.loads(path.read_text())
    del doc["manifest"]["extracted_at"]
    path.write_text(json.dumps(doc))
    before = state.snapshot(env)
    result = run_chain(instance, DAY, DAY, BF)
    assert not result.success
    text = state.failure_text(result)
    assert str(path) in text and "manifest lacks extracted_at" in text, text[:2000]
    assert state.snapshot(env) == before


def test_todays_load_publishes_the_newest_days_later_batch_that_doubles_it(env, instance) -> None:
    """The catch-up publishes the newest day as soon as its first batch lands (9 lines); its next batch (10 more,
    cumulative controls) makes 19. Refused as "doubled", the day stayed at its first batch for good: no tag accepts
    a doubling, and a first publication cannot be rolled back (a review's case)."""
    newest = "2026-09-21"
    assert run_chain(instance, newest).success
    generate.late_delta(env.raw_dir, dt.date.fromisoformat(newest), "B-2026-09-21-02", new=10, restate=0, retract=0)
    result = run_chain(instance, newest)
    assert result.success, state.failure_text(result)
    assert extracts.read(env, newest)["controls"][0] == 19
    [check] = [e for e in result.get_asset_check_evaluations()
               if e.check_name == "fct_order_lines_row_delta_within_bounds"]
    assert check.passed and "grew with landing batches" in check.description, check.description


def test_a_backfill_publishes_a_day_whose_late_batch_doubles_it_as_a_build_from_scratch_does(
        env, instance, published, tmp_path, monkeypatch) -> None:
    """Differential: the same final evidence (a day whose late delta brings 12 more lines to its 12) built from
    scratch in one ranged run publishes 24 lines; the warehouse that published the first batch first publishes the
    same once the late batch is backfilled (a review's case: it refused every backfill of the day)."""
    import shutil

    from atlasmart_assets import settings

    day = "2026-09-04"
    late = lambda raw: generate.late_delta(raw, dt.date.fromisoformat(day), "B-2026-09-04-02",  # noqa: E731
                                           new=12, restate=0, retract=0)
    scratch_raw = tmp_path / "scratch-raw"
    shutil.copytree(env.raw_dir, scratch_raw)
    late(scratch_raw)
    with monkeypatch.context() as mp:
        mp.setenv("ATLASMART_RAW_DIR", str(scratch_raw))
        mp.setenv("ATLASMART_DATA_DIR", str(tmp_path / "scratch-data"))
        assert run_chain(instance, "2026-09-01", "2026-09-10", {**BF, "dagster/backfill": "bf-scratch"}).success
        from_scratch = extracts.read(settings.load(), day)
    assert from_scratch["controls"][0] == 24
    published(("2026-09-01", "2026-09-10", {"dagster/backfill": "bf-1"}))
    late(env.raw_dir)
    result = run_chain(instance, day, day, BF)
    assert result.success, state.failure_text(result)
    assert extracts.read(env, day) == from_scratch


def test_stale_to_alone_lists_the_days_up_to_it(env, published, capsys) -> None:
    """`atlasmart stale --to D` lists the stale days up to D; it was dropped, and every stale day listed (a review)."""
    _publish_history(published)
    generate.late_delta(env.raw_dir, dt.date(2026, 9, 18), "B-2026-09-18-02")
    capsys.readouterr()
    assert cli.main(["stale", "--to", "2026-09-17", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert cli.main(["stale", "--to", "2026-09-18", "--json"]) == 0
    assert [d["partition"] for d in json.loads(capsys.readouterr().out)] == ["2026-09-18"]



def test_a_batch_whose_lines_pass_its_manifests_high_sequence_is_refused_naming_it(env, instance, published) -> None:
    """A late delta whose manifest says source_high_sequence H-1 but whose line carries H+50 (moving the line to
    another customer, the controls unchanged): the manifest does not say which evidence the batch holds. Accepted,
    the record won the merge while the extract's input named the first batch's high sequence (a review found it)."""
    _publish_history(published)
    first = json.loads((env.raw_dir / f"partition={DAY}.json").read_text())
    high = first["manifest"]["source_high_sequence"]
    line = first["lines"][0]
    other = next(x["customer_id"] for x in first["lines"] if x["customer_id"] != line["customer_id"])
    path = env.raw_dir / f"partition={DAY}" / "B-2026-09-18-02.json"
    path.parent.mkdir()
    manifest = {**first["manifest"], "extraction_batch": "B-2026-09-18-02", "kind": "delta",
                "extracted_at": "2026-09-25T01:00:00Z", "source_high_sequence": high - 1, "records": 1}
    path.write_text(json.dumps({"manifest": manifest, "lines": [
        {**line, "customer_id": other, "source_sequence": high + 50}]}))
    before = state.snapshot(env)
    result = run_chain(instance, DAY, DAY, BF)
    assert not result.success
    text = state.failure_text(result)
    assert str(path) in text and f"source_sequence {high + 50}" in text and f"source_high_sequence {high - 1}" in text
    assert state.snapshot(env) == before


def test_as_of_is_the_newest_extraction_of_the_day_s_batches(env, instance, published) -> None:
    """A re-extraction of the same state (same high sequence and controls: the tie rule accepts it) a week later,
    whose batch id sorts before the first's: `as_of` is the newest batch's extracted_at (until 2026-12-07 it was
    that of the batch that sorts last, by name among tied ones)."""
    _publish_history(published)
    doc = json.loads((env.raw_dir / f"partition={DAY}.json").read_text())
    path = env.raw_dir / f"partition={DAY}" / "A-2026-09-18-rerun.json"
    path.parent.mkdir()
    # The same instant in another zone than the first batch's Z, one second later: compared as times, not text.
    path.write_text(json.dumps({"manifest": {**doc["manifest"], "extraction_batch": "A-2026-09-18-rerun",
                                             "kind": "snapshot", "extracted_at": "2026-09-26T03:00:01+02:00"},
                                "lines": doc["lines"]}))
    result = run_chain(instance, DAY, DAY, BF)
    assert result.success, state.failure_text(result)
    assert extracts.read(env, DAY)["input"]["as_of"] == "2026-09-26T03:00:01+02:00"
    assert _ledger(env, DAY)[-1][-1] == "2026-09-26T03:00:01+02:00"
