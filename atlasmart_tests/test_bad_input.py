"""Bad raw input fails the run with a message naming file, partition and problem; nothing published changes."""

import json

import dagster as dg
import pytest

from atlasmart_assets import generate
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state

DAY = "2026-09-19"


def _drop_file(path):
    path.unlink()


def _malformed(path):
    path.write_text(path.read_text()[:-40])


def _missing_field(path):
    doc = json.loads(path.read_text())
    del doc["lines"][3]["unit_cost"]
    path.write_text(json.dumps(doc))


def _mistyped_value(path):
    doc = json.loads(path.read_text())
    doc["lines"][2]["quantity"] = "two"
    path.write_text(json.dumps(doc))


def _controls_disagree(path):
    doc = json.loads(path.read_text())
    doc["manifest"]["controls"]["gmv"] += 1
    path.write_text(json.dumps(doc))


def _edit_line(field: str, value, reconcile: bool = True):  # noqa: ANN001, ANN202
    """Set one line's field; with `reconcile`, the manifest agrees (so only the value's own audit can see it)."""
    def damage(path):  # noqa: ANN001, ANN202
        doc = json.loads(path.read_text())
        doc["lines"][2][field] = value
        if reconcile:
            doc["manifest"]["controls"] = generate.controls_of(
                [{**line, "quantity": int(float(line["quantity"])), "unit_price": float(line["unit_price"]),
                  "unit_cost": float(line["unit_cost"])} for line in doc["lines"]])
        path.write_text(json.dumps(doc))
    damage.__name__ = f"_{field}_{value}"
    return damage


def _not_utf8(path):
    path.write_bytes(path.read_bytes().replace(b"SKU-", b"SKU\xff", 1))


def _null_control(path):
    doc = json.loads(path.read_text())
    doc["manifest"]["controls"]["gmv"] = None
    path.write_text(json.dumps(doc))


def _array_wrapped(path):
    """The day's document inside a JSON array: not a raw partition document, however well formed."""
    path.write_text("[" + path.read_text() + "]")


def _line_of_another_day(path):
    """A line whose line_id is already published for 2026-09-18, delivered again in this day's file."""
    doc = json.loads(path.read_text())
    other = json.loads((path.parent / "partition=2026-09-18.json").read_text())["lines"][0]
    doc["lines"].append({**other, "event_time": doc["lines"][0]["event_time"]})
    doc["manifest"]["records"] += 1
    doc["manifest"]["controls"] = generate.controls_of(doc["lines"])
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("damage, problem", [
    (_edit_line("quantity", "2"), 'quantity "2" is not an integer'),
    (_edit_line("quantity", 2.0), "quantity 2.0 is not an integer"),
    (_edit_line("quantity", -1), "quantity -1 is not positive"),
    (_edit_line("unit_price", 10.555), "unit_price 10.555 is not money"),
    # Past what the warehouse's types hold: a problem of the line, not a cast that fails the window's read.
    (_edit_line("quantity", 2 ** 63), "quantity 9223372036854775808 is out of range (a 64-bit signed integer)"),
    (_edit_line("quantity", 2 ** 64), "quantity 18446744073709551616 is out of range (a 64-bit signed integer)"),
    (_edit_line("source_sequence", -(2 ** 63) - 1), "is out of range (a 64-bit signed integer)"),
    (_edit_line("unit_price", 1e17), "is out of range (money below 10^12)"),
    (_edit_line("unit_price", 90748593534686.41), "is out of range (money below 10^12)"),
    (_edit_line("quantity", float("nan"), reconcile=False), "quantity NaN is not an integer"),
    (_edit_line("unit_cost", float("nan"), reconcile=False), "unit_cost NaN is not money"),
    (_edit_line("unit_cost", 9999999999999998.0), "unit_cost 9999999999999998.0 is out of range (money below 10^12)"),
    (_edit_line("event_time", "2026-09-20T03:00:00Z"), "is not on partition day 2026-09-19"),
    (_not_utf8, "not valid UTF-8"),
    (_array_wrapped, "not a raw partition document"),
    (_null_control, "manifest controls lack gmv"),
    (_line_of_another_day, "line_ids on more than one day"),
])
def test_silent_bad_data_is_refused_naming_the_file(env, instance, published, damage, problem) -> None:
    published(("2026-09-18", None), ("2026-09-20", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    damage(path)
    for start, end in ((DAY, None), ("2026-09-18", "2026-09-20")):
        result = run_chain(instance, start, end, {"dagster/backfill": "bf-bad"} if end else None)
        assert not result.success
        text = state.failure_text(result)
        assert DAY in text and problem in text, text
        if damage is not _line_of_another_day:
            assert str(path) in text, text
        if damage is _not_utf8:  # refused while parsing: the step's progress ends there, naming the file
            ended = [e.user_message for e in instance.all_logs(result.run_id)
                     if "] parse: refused by raw_order_lines_file_readable" in e.user_message]
            assert ended and str(path) in ended[0] and ended[0].endswith("ended"), ended
        assert state.snapshot(env) == before


def _two_documents(path):
    """The day's file as two documents, the second under another batch name; each manifest claims every line of
    the file (records and controls of both halves), so only the lines' own manifests tell the halves apart."""
    doc = json.loads(path.read_text())
    half = len(doc["lines"]) // 2
    first = {"manifest": doc["manifest"], "lines": doc["lines"][:half]}
    second = {"manifest": {**doc["manifest"], "extraction_batch": "B-smuggled"}, "lines": doc["lines"][half:]}
    path.write_text(json.dumps(first) + "\n" + json.dumps(second))


def _manifest_value(field: str, value):  # noqa: ANN001, ANN202
    """Set one manifest field of the day's first file (the one whose extraction_batch no file name holds to)."""
    def damage(path):  # noqa: ANN001, ANN202
        doc = json.loads(path.read_text())
        doc["manifest"][field] = value
        path.write_text(json.dumps(doc))
    damage.__name__ = f"_manifest_{field}"
    return damage


@pytest.mark.parametrize("damage, problem", [
    (_two_documents, "a raw file holds one document"),
    # Manifest values reach the ledger, the extract's input, the notice and every event of the day: a name that
    # is not a batch name, a time that is not a time, or a megabyte of either is refused, quoted cut.
    (_manifest_value("partition", "2026-09-99"), 'manifest says partition "2026-09-99", file name says 2026-09-19'),
    (_manifest_value("extraction_batch", "B-1\n# heading `x` <!channel>"), "is not a batch name"),
    (_manifest_value("extraction_batch", "B" * 200_000), "more characters) is not a batch name"),
    (_manifest_value("extraction_batch", 7), "manifest extraction_batch 7 is not a batch name"),
    (_manifest_value("extraction_batch", "B-1\n"), 'manifest extraction_batch "B-1\\n" is not a batch name'),
    (_manifest_value("extracted_at", {"at": "2026-09-20T01:00:00Z"}), "is not an ISO 8601 timestamp"),
    (_manifest_value("extracted_at", "yesterday"), 'extracted_at "yesterday" is not an ISO 8601 timestamp'),
    (_manifest_value("extracted_at", "2026-09-20"), "is not an ISO 8601 timestamp"),
    # Without it the day's extract would say input.as_of null: consumers could not tell which evidence they read.
    (_manifest_value("extracted_at", None), "manifest lacks extracted_at"),
    (_drop_file, "raw file is missing"),
    (_malformed, "malformed JSON"),
    (_missing_field, "lack unit_cost"),
    (_mistyped_value, 'quantity "two" is not an integer'),
    (_controls_disagree, "manifest says"),
])
def test_bad_input_names_file_partition_problem_and_changes_nothing(env, instance, published, damage, problem) -> None:
    published(("2026-09-18", None), ("2026-09-20", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    damage(path)
    for start, end in ((DAY, None), ("2026-09-18", "2026-09-20")):
        result = run_chain(instance, start, end, {"dagster/backfill": "bf-bad"} if end else None)
        assert not result.success
        text = state.failure_text(result)
        assert DAY in text and str(path) in text and problem in text, text
        assert len(text) < 20_000, "a hostile value is quoted cut, not whole"
        assert state.snapshot(env) == before


def test_an_extraction_time_in_any_iso_8601_form_is_its_as_of(env, instance) -> None:
    # One form per day, all published by one run: a day's as_of is read from its own manifest alone.
    stamps = {"2026-09-16": "2026-09-20T01:00:00Z", "2026-09-17": "2026-09-20T01:00:00+02:00",
              "2026-09-18": "2026-09-20T01:00:00.123456", DAY: "2026-09-20 01:00:00Z"}
    for day, stamp in stamps.items():
        _manifest_value("extracted_at", stamp)(env.raw_dir / f"partition={day}.json")
    result = run_chain(instance, min(stamps), max(stamps))
    assert result.success, state.failure_text(result)
    for day, stamp in stamps.items():
        extract = json.loads((env.data_dir / "published" / f"partition={day}.json").read_text())
        assert extract["input"]["as_of"] == stamp, (day, stamp, extract["input"])


def test_a_quote_in_the_data_dir_is_just_a_character(env, instance, tmp_path, monkeypatch) -> None:
    odd = tmp_path / "analyst's data; drop table x"
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(odd))
    assert run_chain(instance, "2026-09-18", "2026-09-19").success
    assert run_chain(instance, "2026-09-18", "2026-09-19", {"dagster/backfill": "bf-quoted"}).success
    assert (odd / "published" / "partition=2026-09-19.json").exists()


def test_a_reversed_range_is_named_as_such(env, capsys) -> None:
    from atlasmart_assets import cli

    assert cli.main(["rollback", "--from", "2026-09-20", "--to", "2026-09-18", "--reason", "oops"]) == 2
    assert "ends before it starts (did you swap --from and --to?)" in capsys.readouterr().err


def test_a_batch_path_that_cannot_be_read_is_refused_naming_it(env, instance, published) -> None:
    """A directory where a later batch file should be (raw/partition=D/<batch>.json/) cannot be fingerprinted: the
    run is refused by raw_order_lines_file_readable naming the path, the partition and the problem, not failed
    with an error of the operating system's."""
    published(("2026-09-18", None), ("2026-09-20", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}" / "B-2026-09-19-02.json"
    path.mkdir(parents=True)
    result = run_chain(instance, DAY)
    assert not result.success
    text = state.failure_text(result)
    assert "raw_order_lines_file_readable" in text and str(path) in text and DAY in text, text
    assert "cannot be read" in text, text
    assert state.snapshot(env) == before


def test_every_day_without_its_raw_file_is_named_and_no_check_that_read_nothing_passes(env, instance,
                                                                                      published) -> None:
    """A backfill over a window in which several days have no raw file and one day a misnamed batch: the refusal
    names every one of them (before, only the first: an operator found the next one run after run, and a misnamed
    batch anywhere hid every missing day), its check result carries each day, and the raw checks that read nothing
    report nothing (before, five of them passed with "0 files pass", green in the UI for the whole refused window).
    Nothing published changes."""
    published(("2026-09-18", None), ("2026-09-20", None))
    before = state.snapshot(env)
    gone = ["2026-09-03", "2026-09-07", "2026-09-08", "2026-09-15"]
    for day in gone:
        (env.raw_dir / f"partition={day}.json").unlink()
    misnamed = env.raw_dir / "partition=2026-09-10" / "@late.json"
    misnamed.parent.mkdir()
    misnamed.write_text("{}")
    result = run_chain(instance, "2026-09-01", "2026-09-20", {"dagster/backfill": "bf-missing"})
    assert not result.success
    text = state.failure_text(result)
    assert "raw_order_lines_file_readable" in text and all(day in text for day in gone), text
    assert str(misnamed) in text, text
    evaluations = result.get_asset_check_evaluations()
    assert [e.check_name for e in evaluations] == ["raw_order_lines_file_readable"], evaluations
    [readable] = evaluations
    assert not readable.passed
    described = readable.description or ""
    assert described == (
        "(1) a batch file is named <extraction_batch>.json (letters, digits, '_', '.', '-'): 1 raw partition(s); "
        "(2) raw file is missing (no evidence was extracted for this day): 4 raw partition(s). "
        f"(1) raw partition 2026-09-10 ({misnamed}); (2) 2026-09-03, 2026-09-07..2026-09-08, 2026-09-15 "
        f"({env.raw_dir / 'partition=2026-09-03.json'} and 3 other file(s))"), described
    figures = readable.metadata["figures"].value
    assert sorted(figures) == sorted([*gone, "2026-09-10"]), figures
    assert all(figures[day] == "raw file missing" for day in gone), figures
    ended = [e.user_message for e in instance.all_logs(result.run_id)
             if "] parse: refused by raw_order_lines_file_readable" in e.user_message]
    assert ended and "2026-09-03" in ended[0] and "and 4 more problem(s)" in ended[0] and ended[0].endswith("ended"), ended
    assert state.snapshot(env) == before


def test_a_years_scattered_missing_days_are_each_named_within_the_check_events_budget(tmp_path) -> None:
    """319 days of a year without their raw file, scattered in 47 ranges (found by a review): the check's figures,
    as written to its event, name every one of them (before, the figures' budget kept about half the days and the
    description the first eleven ranges), and the description names the ranges within its budget."""
    import datetime as dt

    from atlasmart_assets import raw_files, raw_load
    from atlasmart_assets.assets.common import check_result, refuse

    days = [(dt.date(2025, 9, 23) + dt.timedelta(days=k)).isoformat() for k in range(365)]
    gone = [d for k, d in enumerate(days) if k % 8]
    findings = [raw_files.Finding(raw_load.FILE_READABLE, d, tmp_path / f"partition={d}.json", raw_files.MISSING)
                for d in gone]
    [audit] = raw_load._audits(findings, [], (raw_load.FILE_READABLE,))
    result = check_result(audit)
    figures = result.metadata["figures"].value
    assert sorted(figures) == gone and "entries_omitted" not in figures, sorted(set(gone) - set(figures))[:5]
    assert result.description is not None and result.description.startswith(
        f"raw file is missing (no evidence was extracted for this day): {len(gone)} raw partition(s), ")
    assert gone[-1] in result.description and "…" not in result.description, result.description
    assert len(result.description.encode()) <= 2000
    # The step's failure keeps 500 bytes of the description: it still says what is wrong (a review found the days
    # listed first pushed the problem out of it).
    with pytest.raises(dg.Failure) as failed:
        refuse("2025-09-23..2026-09-22", [audit])
    assert "raw file is missing" in (failed.value.description or ""), failed.value.description
    # Two problems, each on scattered days: the failure says both (a review found the second problem's text after
    # the first one's whole list of days, past the 500 bytes).
    misnamed = [raw_files.Finding(raw_load.FILE_READABLE, d, tmp_path / f"partition={d}" / "@x.json",
                                  "a batch file is named <extraction_batch>.json") for d in days[1:60:2]]
    [both] = raw_load._audits(findings[:50] + misnamed, [], (raw_load.FILE_READABLE,))
    with pytest.raises(dg.Failure) as failed:
        refuse("2025-09-23..2026-09-22", [both])
    text = failed.value.description or ""
    assert "raw file is missing" in text and "a batch file is named" in text, text


def _refusal(raw, window):  # noqa: ANN001, ANN202
    from atlasmart_assets import raw_files

    with pytest.raises(raw_files.RawInputError) as caught:
        raw_files._locate(raw, window)
    return caught.value


def _days(raw, window) -> None:  # noqa: ANN001
    for day in window.keys:
        (raw / f"partition={day}.json").write_text("{}")


def test_a_misnamed_batch_of_a_day_missing_its_first_file_is_named_too(tmp_path) -> None:
    """Found by a review: a day whose first file is missing had its later batches skipped, so its misnamed batch
    was refused only by the next run, once the first file was restored."""
    from atlasmart_assets.window import Window

    window = Window.of("2026-09-01", "2026-09-03")
    _days(tmp_path, window)
    (tmp_path / "partition=2026-09-02.json").unlink()
    bad = tmp_path / "partition=2026-09-02" / "@late.json"
    bad.parent.mkdir()
    bad.write_text("{}")
    assert [e.path for e in _refusal(tmp_path, window).each()] == [tmp_path / "partition=2026-09-02.json", bad]


def test_the_refusals_message_says_each_kind_of_problem_and_counts_files_not_days(tmp_path) -> None:
    """One day missing its file and three misnamed batches on another: the message says both kinds (before it read
    '… raw file is missing … (and 3 more: 2026-09-03 (1 day))', as if three more files were missing), and the check
    counts five misnamed batches of one day as five files of one partition, not as five partitions."""
    from atlasmart_assets import raw_files, raw_load
    from atlasmart_assets.window import Window

    window = Window.of("2026-09-01", "2026-09-03")
    _days(tmp_path, window)
    (tmp_path / "partition=2026-09-01.json").unlink()
    (tmp_path / "partition=2026-09-03").mkdir()
    for k in range(5):
        (tmp_path / "partition=2026-09-03" / f"@b{k}.json").write_text("{}")
    exc = _refusal(tmp_path, window)
    text = str(exc)
    assert "raw file is missing" in text and "5 more problem(s), among them: a batch file is named" in text, text
    findings = [raw_files.Finding(raw_load.FILE_READABLE, e.partition, e.path, e.problem) for e in exc.each()]
    [audit] = raw_load._audits(findings, [], (raw_load.FILE_READABLE,))
    assert "(2) a batch file is named <extraction_batch>.json (letters, digits, '_', '.', '-'): 5 files of 1 raw " \
           "partition(s). (1) raw partition 2026-09-01 (" in audit.description, audit.description
    assert audit.figures == {"2026-09-01": "raw file missing",
                             "2026-09-03": f"{findings[-1].problem} (5 files)"}, audit.figures


def test_a_manifest_after_the_lines_is_read_as_one_first(env, instance, published, monkeypatch, tmp_path) -> None:
    """The manifest is read from the file's head only where it comes first: a day whose file has its lines first
    publishes what the same document in the usual order does (its manifest read from the whole document)."""
    path = env.raw_dir / f"partition={DAY}.json"
    # The usual order is the shipped file: its day as another test's cached run published it.
    published((DAY, None))
    extracts = {"usual": json.loads((env.published_dir / f"partition={DAY}.json").read_text())}
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({"lines": doc["lines"], "manifest": doc["manifest"]}))
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "lines first"))
    assert run_chain(instance, DAY).success, "lines first"
    extracts["lines first"] = json.loads((tmp_path / "lines first" / "published" / path.name).read_text())
    # The content and its sha256 are the same; the evidence (a file with another sha256) is not.
    assert extracts["lines first"]["sha256"] == extracts["usual"]["sha256"]
    assert extracts["lines first"]["controls"] == extracts["usual"]["controls"]
    assert extracts["lines first"]["input"] != extracts["usual"]["input"]


def test_a_read_duckdb_refuses_without_naming_a_file_is_blamed_on_the_file_that_fails_alone(env) -> None:
    """When DuckDB's message names no file (a cast, say), each file of the window is read alone until one fails:
    the refusal names that file and its day, not the window's every path."""
    import duckdb

    from atlasmart_assets import raw_files

    days = ["2026-09-17", "2026-09-18", "2026-09-19", "2026-09-20"]
    paths = {env.raw_dir / f"partition={d}.json": d for d in days}
    bad = env.raw_dir / f"partition={DAY}.json"
    doc = json.loads(bad.read_text())
    doc["lines"][1]["event_time"] = "20260919T030000Z"  # ISO 8601's basic form: Python reads it, DuckDB does not
    bad.write_text(json.dumps(doc))
    con = duckdb.connect()
    error = raw_files._explain_parse_failure(con, paths, duckdb.ConversionException("a cast failed"))
    assert (error.path, error.partition) == (bad, DAY), error
    assert "DuckDB could not read this raw file" in error.problem and "20260919T030000Z" in error.problem, error
    bad.write_text(json.dumps({**doc, "lines": doc["lines"][:1]}))  # every file reads alone: the window is named
    error = raw_files._explain_parse_failure(con, paths, duckdb.ConversionException("a cast failed"))
    assert error.partition == "2026-09-17..2026-09-20" and "a cast failed" in error.problem, error


def test_a_first_file_that_vanishes_while_the_window_is_located_never_lets_its_day_pass_without_it(
        tmp_path, monkeypatch) -> None:
    """The day's first file looked at once (a review found two looks: present at the first, gone at the second, and
    the day went on with its later batches alone, never refused): it is located, and the read then refuses it."""
    from pathlib import Path

    from atlasmart_assets import raw_files
    from atlasmart_assets.window import Window

    window = Window.of("2026-09-01")
    first = tmp_path / "partition=2026-09-01.json"
    first.write_text("{}")
    later = tmp_path / "partition=2026-09-01" / "B-2.json"
    later.parent.mkdir()
    later.write_text("{}")
    looks: list[Path] = []
    real = Path.is_file

    def vanishing(self: Path) -> bool:
        if self == first:
            looks.append(self)
            return len(looks) == 1  # there at the first look only
        return real(self)

    monkeypatch.setattr(Path, "is_file", vanishing)
    paths = raw_files._locate(tmp_path, window)
    assert paths == {first: "2026-09-01", later: "2026-09-01"}, paths


def _one_order_of_two_groups(raw, lines: list[dict]) -> tuple[str, str, str]:  # noqa: ANN001
    """Gives the first line's order to a line of a customer in another country (so in another of the mart's
    groups): (the order, its customer, the other one)."""
    country = {c["customer_id"]: c["country"] for c in json.loads((raw / "customers.json").read_text())["customers"]}
    first = lines[0]
    other = next(x for x in lines if country.get(x["customer_id"], "?") != country.get(first["customer_id"], "?"))
    other["order_id"] = first["order_id"]
    return first["order_id"], first["customer_id"], other["customer_id"]


def test_an_order_of_two_customers_is_refused_naming_the_order_its_customers_and_its_file(env, instance,
                                                                                         published) -> None:
    """An order's lines belong to one customer: one split across country x tier groups is counted once in each by
    the mart and once by the fact. Refused by the mart's audit, which says so, naming the order, the day, its
    customers and the batch file (a review found "controls differ from fact_candidate" and nothing else)."""
    published(("2026-09-17", "2026-09-18"), ("2026-09-20", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    doc = json.loads(path.read_text())
    order, one, other = _one_order_of_two_groups(env.raw_dir, doc["lines"])
    doc["manifest"]["controls"] = generate.controls_of(doc["lines"])
    path.write_text(json.dumps(doc))
    result = run_chain(instance, DAY)
    assert not result.success
    text = state.failure_text(result)
    assert f"order {order} of {DAY} has lines of customers {min(one, other)}" in text, text
    assert max(one, other) in text and str(path) in text, text
    assert "an order belongs to one customer" in text, text
    [check] = [e for e in result.get_asset_check_evaluations() if not e.passed]
    assert check.check_name == "revenue_daily_candidate_totals_match_fact", check
    [split] = check.metadata["figures"].value["split_orders"]
    assert (split["partition"], split["order_id"], split["files"]) == (DAY, order, [str(path)]), split
    assert [c.split(" ")[0] for c in split["customers"]] == sorted([one, other]), split
    assert state.snapshot(env) == before


def test_an_order_split_by_a_late_batch_is_refused_naming_both_files(env, instance, published) -> None:
    """A late batch that restates one line under another customer's order: each file alone is consistent, the
    merged day is not, and the refusal names the files that hold the order's lines."""
    import datetime as dt

    published(("2026-09-17", "2026-09-18"), ("2026-09-20", None))
    before = state.snapshot(env)
    day = "2026-09-18"
    first = env.raw_dir / f"partition={day}.json"
    lines = json.loads(first.read_text())["lines"]
    order, _, moved = _one_order_of_two_groups(env.raw_dir, [dict(x) for x in lines])
    line = next(x for x in lines if x["customer_id"] == moved)
    restated = {**line, "order_id": order, "source_sequence": max(x["source_sequence"] for x in lines) + 1}
    late = generate.write_batch(env.raw_dir, dt.date.fromisoformat(day), "B-2026-09-18-02", [restated])
    result = run_chain(instance, day, day, {"dagster/backfill": "bf-split", "atlasmart/reason": "late batch"})
    assert not result.success
    text = state.failure_text(result)
    assert f"order {order} of {day} has lines of customers" in text and str(first) in text and str(late) in text, text
    assert state.snapshot(env) == before


@pytest.mark.parametrize("tag", ["atlasmart/reason", "atlasmart/fence_override", "ticket"])
def test_a_run_whose_reason_or_tag_is_too_long_to_record_is_refused_before_anything_moves(env, instance, published,
                                                                                      tag) -> None:
    """A reason (or an override, or an operator's own tag) goes into every day's ledger row, the notice, Slack and
    the events: past REASON_MAX_CHARS the run is refused before anything is written, as a rollback's reason is, and
    Slack shows it cut. A review found a 240,000-character reason stored whole on each day of the backfill."""
    from atlasmart_assets.alerts import format as fmt
    from atlasmart_assets.contract import REASON_MAX_CHARS
    published(("2026-09-18", "2026-09-20"))
    before = state.snapshot(env)
    value = "see incident " * 20_000 + "end"
    result = run_chain(instance, "2026-09-18", "2026-09-20", {"dagster/backfill": "bf-long", tag: value})
    assert not result.success
    text = state.failure_text(result)
    assert f"is {len(value):,} characters, past the {REASON_MAX_CHARS:,}" in text and "Nothing was written" in text
    assert state.snapshot(env) == before
    started = fmt.backfill_started(fmt.Backfill("bf-long", "2026-09-18..2026-09-20", ["mart/revenue_daily"], value,
                                                None), fmt.Links("http://localhost:3000"), "mart/revenue_daily")
    assert len(started) == 1 and f"({len(value):,} characters)" in json.dumps(started[0].blocks)
    assert run_chain(instance, "2026-09-18", "2026-09-20",
                     {"dagster/backfill": "bf-short", tag: value[:REASON_MAX_CHARS]}).success
