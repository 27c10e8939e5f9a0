"""DuckDB's JSON reader refuses a document larger than its buffer (maximum_object_size): the buffer is sized to the
largest file read, any file of up to 64 MiB loads, and a larger one is refused naming it before anything is read or
written."""

import json
from pathlib import Path

import pytest

from atlasmart_assets import raw_files
from atlasmart_assets.lab import run_chain
from atlasmart_tests import state

DAY = "2026-09-19"
MiB = 1 << 20


def _pad(path: Path, size: int) -> dict:
    """The day's document grown to `size` bytes by a field the read does not take (`note`, on its last line), on one
    line: the same manifest, the same lines as read. Whitespace would not do: DuckDB reads a document padded with it
    past its buffer (a 16 MiB + 1 file so padded loaded with a 16 MiB buffer), so such a test could not fail."""
    doc = json.loads(path.read_text())
    doc["lines"][-1]["note"] = ""
    doc["lines"][-1]["note"] = "x" * (size - len(json.dumps(doc).encode()))
    path.write_text(json.dumps(doc))
    assert path.stat().st_size == size
    del doc["lines"][-1]["note"]
    return doc


def test_the_buffer_holds_the_largest_file_within_16_and_64_mib(tmp_path: Path) -> None:
    def size_for(*sizes: int) -> int:
        paths = []
        for k, n in enumerate(sizes):
            p = tmp_path / f"{k}-{n}.json"
            with p.open("wb") as fh:
                fh.truncate(n)
            paths.append(p)
        return raw_files.object_size(paths)

    assert size_for() == size_for(10) == 16 * MiB == size_for(16 * MiB)
    assert size_for(16 * MiB + 1) == 32 * MiB == size_for(3, 32 * MiB, 9)
    assert size_for(40 * MiB) == 64 * MiB == size_for(64 * MiB)
    for n in (1, 5 * MiB, 16 * MiB + 1, 33 * MiB, 64 * MiB):
        assert n <= size_for(n) < 2 * max(n, 8 * MiB + 1)


@pytest.mark.parametrize("size", [16 * MiB + 1, 64 * MiB])
def test_a_file_past_the_smallest_buffer_loads_as_its_lines_say(env, instance, size: int) -> None:
    path = env.raw_dir / f"partition={DAY}.json"
    doc = _pad(path, size)
    assert run_chain(instance, DAY).success
    published = json.loads((env.published_dir / f"partition={DAY}.json").read_text())
    manifest = doc["manifest"]["controls"]
    assert published["controls"] == [manifest[k] for k in ("lines", "orders", "units", "gmv", "cost", "gross_profit")]
    [(rows,)] = state.table_rows(env, "(select count(*) from raw.order_lines where partition_date = '2026-09-19')")
    assert rows == len(doc["lines"])


def test_a_file_past_64_mib_is_refused_naming_it_and_nothing_changes(env, instance, published) -> None:
    published(("2026-09-18", None))
    before = state.snapshot(env)
    path = env.raw_dir / f"partition={DAY}.json"
    _pad(path, 64 * MiB + 1)
    for start, end in ((DAY, None), ("2026-09-18", DAY)):
        result = run_chain(instance, start, end, {"dagster/backfill": "bf-large"} if end else None)
        assert not result.success
        text = state.failure_text(result)
        assert str(path) in text and DAY in text and "67,108,865 bytes, past the 64 MiB" in text, text
        assert state.snapshot(env) == before


def test_the_size_check_gives_the_buffer_and_refuses_what_it_cannot_look_at(tmp_path: Path) -> None:
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    small.write_text("{}")
    with large.open("wb") as fh:
        fh.truncate(20 * MiB)
    assert raw_files.sized({small: DAY, large: DAY}) == raw_files.object_size([small, large]) == 32 * MiB
    gone = tmp_path / "gone.json"
    with pytest.raises(raw_files.RawInputError) as refused:
        raw_files.sized({small: DAY, gone: DAY})
    assert refused.value.path == gone and refused.value.partition == DAY and "cannot be read" in str(refused.value)


def test_a_file_gone_before_a_failed_read_is_explained_is_refused_naming_it(tmp_path: Path) -> None:
    """A batch removed after its size was taken (raw must never be removed) fails DuckDB's read; the explanation
    names it as unreadable instead of failing on it."""
    import duckdb

    gone = tmp_path / "partition=2026-09-19.json"
    refused = raw_files._explain_parse_failure(duckdb.connect(), {gone: DAY}, duckdb.IOException("no such file"))
    assert refused.path == gone and refused.partition == DAY and "cannot be read" in refused.problem


def _days_of_lines(raw_dir: Path, days: int, lines: int) -> dict[Path, str]:
    import datetime as dt

    from atlasmart_assets import generate

    out = {}
    for k in range(days):
        day = dt.date(2026, 9, 1) + dt.timedelta(days=k)
        out[generate.write_raw(raw_dir, day, generate.synthetic_lines(day, lines, 500, seed=k))] = day.isoformat()
    return out


def _scratch(tmp_path: Path, limit: str, threads: int):
    import duckdb

    con = duckdb.connect(str(tmp_path / "scratch.duckdb"),
                         config={"memory_limit": limit, "threads": str(threads), "preserve_insertion_order": "false"})
    con.execute("create schema candidate")
    return con


def test_a_parse_takes_the_threads_its_memory_limit_holds_the_largest_file_on(tmp_path: Path) -> None:
    """A large file is parsed on fewer threads (each holds about PARSE_MEMORY_PER_BYTE times it); the connection's
    own threads before and after, and a window of small files keeps them all."""
    small, large = tmp_path / "small.json", tmp_path / "large.json"
    small.write_bytes(b"x" * (4 * MiB))
    with large.open("wb") as fh:
        fh.truncate(54 * MiB)
    con = _scratch(tmp_path, "1GB", 8)
    seen = {}
    sizes = raw_files.file_sizes({small: DAY, large: DAY})
    for name, paths in (("small", [small]), ("large", [large, small])):
        with raw_files._threads_for(con, max(sizes[p] for p in paths)):
            seen[name] = con.execute("select current_setting('threads')").fetchone()[0]
    assert seen == {"small": 8, "large": 1}, seen
    assert con.execute("select current_setting('threads')").fetchone()[0] == 8
    assert raw_files.memory_limit_bytes(con) == pytest.approx(10**9, rel=0.01)
    assert [sorted(p.name for p in g) for g in raw_files._size_groups(sizes)] == \
        [["small.json"], ["large.json"]], "small files are read apart from large ones, keeping every core"


def test_a_window_of_large_files_loads_within_the_memory_limit(tmp_path: Path) -> None:
    """Three days of 75,000 lines (17 MB files) at a 300 MB limit on two threads: one file at a time fits (on one
    thread they loaded at 250 MB), two at a time do not (on two threads they ran out of 350 MB, and were refused as
    unreadable; so did a window of six 54 MB files at the default 1 GB). Every line loads."""
    from atlasmart_assets.window import Window

    files = _days_of_lines(tmp_path / "raw", 3, 75_000)
    assert min(p.stat().st_size for p in files) > raw_files.LARGE_FILE
    con = _scratch(tmp_path, "300MB", 2)
    loaded = raw_files.load_window(con, tmp_path / "raw", Window.of("2026-09-01", "2026-09-03"), threads=2)
    assert len(loaded) == 3
    records = sum(int(f.manifest["records"]) for f in loaded)
    assert records >= 3 * 75_000 and con.execute("select count(*) from candidate.raw_lines").fetchone()[0] == records


def test_a_parse_past_the_memory_limit_fails_naming_the_setting_not_the_files(tmp_path: Path) -> None:
    from atlasmart_assets.window import Window

    _days_of_lines(tmp_path / "raw", 1, 75_000)
    con = _scratch(tmp_path, "64MB", 1)
    with pytest.raises(raw_files.ParseMemoryError) as failed:
        raw_files.load_window(con, tmp_path / "raw", Window.of("2026-09-01"), threads=1)
    text = str(failed.value)
    assert "raw 2026-09-01: DuckDB ran out of memory parsing 1 raw file(s)" in text, text
    assert "ATLASMART_DUCKDB_MEMORY_LIMIT" in text and "nothing was loaded" in text, text
