"""Raw evidence and settings a hostile or careless world hands the parse (found by a review on scenarios no test had):
each is refused naming the file, partition and problem, or read as what it is, and nothing published changes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from atlasmart_assets import generate, raw_files, settings
from atlasmart_assets.lab import run_chain
from atlasmart_assets.window import Window
from atlasmart_tests import state
from atlasmart_tests.conftest import REPO_RAW

DAY = "2026-09-19"


def _doc(path: Path) -> dict:
    return json.loads(path.read_text())


def test_a_second_document_without_a_manifest_is_refused_naming_the_file(env, instance, published) -> None:
    """The day's manifest with half its lines, then a second document of the other half without a manifest: its
    lines are read under no day, and the profile failed on them (AttributeError) instead of refusing the file."""
    published(("2026-09-18", None), ("2026-09-20", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    doc = _doc(path)
    path.write_text(json.dumps({"manifest": doc["manifest"], "lines": doc["lines"][:6]}) + "\n"
                    + json.dumps({"lines": doc["lines"][6:]}))
    result = run_chain(instance, DAY)
    assert not result.success
    text = state.failure_text(result)
    assert str(path) in text and DAY in text and "a raw file holds one document" in text, text[:600]
    assert state.snapshot(env) == before


@pytest.mark.parametrize("own, sibling", [("atlas[prod]/raw", "atlasp/raw"), ("raw*", "raw-backup"),
                                          ("raw?", "raw2")])
def test_a_raw_dir_named_like_a_pattern_reads_its_own_files_only(tmp_path, monkeypatch, instance, own: str,
                                                                  sibling: str) -> None:
    """DuckDB's readers expand `*`, `?` and `[...]` in any path: a raw dir `raw*` beside a backup `raw-backup`
    loaded every line twice, and `atlas[prod]` read `atlasp`'s files."""
    raw = tmp_path / own
    shutil.copytree(REPO_RAW, raw)
    shutil.copytree(REPO_RAW, tmp_path / sibling)
    monkeypatch.setenv("ATLASMART_RAW_DIR", str(raw))
    monkeypatch.setenv("ATLASMART_DATA_DIR", str(tmp_path / "data"))
    result = run_chain(instance, DAY)
    assert result.success, state.failure_text(result)
    [(rows,)] = state.table_rows(settings.load(), f"(select count(*) from raw.order_lines where partition_date = '{DAY}')")
    assert rows == len(_doc(raw / f"partition={DAY}.json")["lines"])


def _change_after_fingerprint(monkeypatch, path: Path, text: str) -> None:
    """A writer finishes (or replaces) the file right after the run took its sha256, before the parse reads it."""
    real = raw_files.fingerprints
    armed = [True]

    def fingerprints(paths, threads=None):  # type: ignore[no-untyped-def]
        out = real(paths, threads)
        if armed[0] and path in paths:
            armed[0] = False
            path.write_text(text)
        return out

    monkeypatch.setattr(raw_files, "fingerprints", fingerprints)


def test_a_file_completed_after_its_sha256_was_taken_is_refused_and_loads_once_complete(env, instance,
                                                                                       monkeypatch) -> None:
    """Hashed half written, parsed whole: the run loaded the whole file under the half file's sha256, and every later
    run of the day was refused for a changed file that had not changed since."""
    path = env.raw_dir / f"partition={DAY}.json"
    whole = path.read_text()
    path.write_text(whole[: len(whole) // 2])
    _change_after_fingerprint(monkeypatch, path, whole)
    first = run_chain(instance, DAY)
    assert not first.success
    assert str(path) in state.failure_text(first) and "changed while it was read" in state.failure_text(first)
    again = run_chain(instance, DAY)
    assert again.success, state.failure_text(again)
    [(recorded,)] = state.table_rows(env, f"(select sha256 from raw.batches where partition_date = '{DAY}')")
    assert recorded == raw_files.sha256_of(path)


def test_a_loaded_file_replaced_between_its_sha256_and_its_read_is_refused_not_re_read(env, instance,
                                                                                      monkeypatch) -> None:
    assert run_chain(instance, DAY).success
    path = env.raw_dir / f"partition={DAY}.json"
    before = state.snapshot(env)
    doc = _doc(path)
    doc["lines"][0]["quantity"] += 5
    doc["manifest"]["controls"] = generate.controls_of(doc["lines"])
    _change_after_fingerprint(monkeypatch, path, json.dumps(doc))
    result = run_chain(instance, DAY, None, {"atlasmart/rederive": "the day is built, not kept"})
    assert not result.success and "changed while it was read" in state.failure_text(result)
    assert state.snapshot(env) == before


def test_a_file_whose_bytes_did_not_change_is_not_refused_for_a_link_or_a_chmod(env, instance, monkeypatch) -> None:
    """A backup hard-linking raw (`cp -al`) or a chmod while the run reads it change the file's inode links and
    change time, never its bytes: the run goes on."""
    import os
    path = env.raw_dir / f"partition={DAY}.json"
    real = raw_files.fingerprints

    def fingerprints(paths, threads=None):  # type: ignore[no-untyped-def]
        out = real(paths, threads)
        if path in paths and not (env.raw_dir / "backup.json").exists():
            os.link(path, env.raw_dir / "backup.json")
            path.chmod(0o640)
        return out

    monkeypatch.setattr(raw_files, "fingerprints", fingerprints)
    result = run_chain(instance, DAY)
    assert result.success, state.failure_text(result)


def test_a_failed_read_is_blamed_on_the_file_duckdb_names(tmp_path) -> None:
    """Day 18 starts with a UTF-8 byte-order mark, which DuckDB reads; day 19 holds an event_time DuckDB cannot
    cast, and its error names day 19's file. The strict reader's objection to day 18 was blamed instead."""
    raw = tmp_path / "raw"
    raw.mkdir()
    for d in ("2026-09-18", DAY):
        shutil.copy(REPO_RAW / f"partition={d}.json", raw)
    p18, p19 = raw / "partition=2026-09-18.json", raw / f"partition={DAY}.json"
    p18.write_bytes(b"\xef\xbb\xbf" + p18.read_bytes())
    doc = _doc(p19)
    doc["lines"][1]["event_time"] = "20260919T030000Z"
    p19.write_text(json.dumps(doc))
    con = duckdb.connect()
    con.execute("create schema candidate")
    with pytest.raises(raw_files.RawInputError) as refused:
        raw_files.load_window(con, raw, Window.of("2026-09-18", DAY))
    assert refused.value.path == p19, str(refused.value)


def test_tiny_files_load_on_as_many_threads_as_their_read_buffers_fit(tmp_path) -> None:
    """Each parse thread holds the JSON reader's two buffers (2 x 16 MiB at the least) whatever the file's size: the
    shipped 3 KB files on 8 threads ran out of 100 MB, where the budget counted only 12 times the file."""
    raw = tmp_path / "raw"
    shutil.copytree(REPO_RAW, raw)
    con = duckdb.connect(str(tmp_path / "scratch.duckdb"),
                         config={"memory_limit": "100MB", "threads": "8", "preserve_insertion_order": "false"})
    con.execute("create schema candidate")
    raw_files.load_window(con, raw, Window.of("2026-09-01", DAY))
    assert con.execute("select count(distinct partition_date) from candidate.raw_lines").fetchone()[0] == 19
    assert raw_files.thread_memory(3000) >= 2 * raw_files.OBJECT_SIZE_MIN


def test_a_first_file_rewritten_in_place_is_refused_even_when_its_old_batch_moves(env, instance) -> None:
    """partition=D.json is loaded; then it is rewritten as another batch and its old bytes moved to a later batch's
    name: each batch id still has its sha256, but the file does not."""
    assert run_chain(instance, DAY).success
    first = env.raw_dir / f"partition={DAY}.json"
    old_bytes = first.read_bytes()
    doc = json.loads(old_bytes)
    (env.raw_dir / f"partition={DAY}").mkdir()
    (env.raw_dir / f"partition={DAY}" / f"{doc['manifest']['extraction_batch']}.json").write_bytes(old_bytes)
    lines = doc["lines"][:6]
    first.write_text(json.dumps({"manifest": {**doc["manifest"], "extraction_batch": "B-2026-09-19-00",
                                              "source_high_sequence": max(x["source_sequence"] for x in lines),
                                              "records": len(lines), "controls": generate.controls_of(lines)},
                                 "lines": lines}))
    before = state.snapshot(env)
    result = run_chain(instance, DAY)
    assert not result.success
    text = state.failure_text(result)
    assert str(first) in text and "now holds batch B-2026-09-19-00" in text, text[:600]
    assert state.snapshot(env) == before


@pytest.mark.parametrize("field, value", [("source_high_sequence", 2 ** 64), ("records", 2 ** 63),
                                          ("source_high_sequence", -(2 ** 63) - 1), ("records", -1)])
def test_a_manifest_integer_past_64_bits_is_refused_naming_the_file(env, instance, published, field: str,
                                                                    value: int) -> None:
    published(("2026-09-18", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    doc = _doc(path)
    doc["manifest"][field] = value
    path.write_text(json.dumps(doc))
    result = run_chain(instance, DAY)
    assert not result.success
    text = state.failure_text(result)
    assert str(path) in text and f"manifest {field}" in text and "out of range" in text, text[:600]
    assert state.snapshot(env) == before


def test_a_megabyte_schema_version_does_not_push_the_problem_out_of_the_refusal(env, instance) -> None:
    path = env.raw_dir / f"partition={DAY}.json"
    doc = _doc(path)
    doc["manifest"]["schema_version"] = "v" * 1_000_000
    del doc["lines"][3]["unit_cost"]
    path.write_text(json.dumps(doc))
    result = run_chain(instance, DAY)
    assert not result.success
    text = state.failure_text(result)
    assert "1 lines lack unit_cost" in text and len(text) < 20_000, text[:300]


@pytest.mark.parametrize("limit", ["150%", "1000%", "\u0661GB", "16MB", "-5GB", "-1GB", " -2"])
def test_a_memory_limit_no_run_could_work_in_is_refused_when_the_code_location_loads(limit: str) -> None:
    with pytest.raises(ValueError) as err:
        settings.load({"ATLASMART_DUCKDB_MEMORY_LIMIT": limit})
    assert "ATLASMART_DUCKDB_MEMORY_LIMIT" in str(err.value)


def test_a_memory_limit_past_a_pebibyte_is_read_as_duckdb_shows_it(tmp_path) -> None:
    con = duckdb.connect(config={"memory_limit": settings.load({"ATLASMART_DUCKDB_MEMORY_LIMIT": "2000TB"})
                                 .duckdb_memory_limit})
    assert raw_files.memory_limit_bytes(con) > 10**18 // 1000
