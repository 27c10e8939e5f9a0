"""The manifest header read from a raw file's head, against DuckDB's read of the whole document."""

import json
from pathlib import Path

import duckdb

from atlasmart_assets import raw_files, sql
from atlasmart_tests.conftest import REPO_RAW


def _duckdb_manifests(files: list[Path]) -> dict[str, dict]:
    con = duckdb.connect()
    rows = con.execute(sql.text("raw_manifests"), raw_files.read_params(files)).fetchall()
    return {file: json.loads(text) for file, text in rows}


def test_the_head_gives_the_manifest_duckdb_reads_from_every_shipped_file() -> None:
    files = sorted(REPO_RAW.glob("partition=*.json")) + sorted(REPO_RAW.glob("partition=*/*.json"))
    assert len(files) > 20
    heads = {str(p): raw_files.head_manifest(p) for p in files}
    assert all(text is not None for text in heads.values()), [p for p, t in heads.items() if t is None]
    assert {p: json.loads(t) for p, t in heads.items()} == _duckdb_manifests(files)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_manifest_the_head_cannot_hold_is_left_to_duckdb(tmp_path: Path) -> None:
    manifest = {"partition": "2026-09-19", "extraction_batch": "B1", "note": "é" * raw_files.HEAD_BYTES}
    lines = [{"line_id": "L1"}]
    cases = {
        "lines first": {"lines": lines, "manifest": manifest | {"note": "x"}},
        "longer than the head": {"manifest": manifest, "lines": lines},
    }
    files = [_write(tmp_path / f"{name}.json", json.dumps(doc, ensure_ascii=False)) for name, doc in cases.items()]
    assert [raw_files.head_manifest(p) for p in files] == [None, None]
    # Both read in full by DuckDB instead, the same manifests.
    assert raw_files.manifests(duckdb.connect(), files) == {
        str(p): json.dumps(doc["manifest"], ensure_ascii=False, separators=(",", ":"))
        for p, doc in zip(files, cases.values())}


def test_a_character_cut_by_the_head_and_odd_spacing_read_as_json_does(tmp_path: Path) -> None:
    # The head's last bytes fall inside a two-byte character, after the manifest has ended.
    manifest = {"partition": "2026-09-19", "extraction_batch": "B\u00e91", "records": 1}
    prefix = '\n\t {  "manifest" :\r\n ' + json.dumps(manifest) + ' ,\n"lines": [{"line_id": "'
    pad = raw_files.HEAD_BYTES - len(prefix.encode()) - 1
    path = _write(tmp_path / "cut.json", prefix + "x" * pad + "\u00e9\"}]}")
    assert path.read_bytes()[raw_files.HEAD_BYTES - 1:raw_files.HEAD_BYTES + 1] == "\u00e9".encode()
    assert json.loads(raw_files.head_manifest(path)) == manifest
    assert json.loads(raw_files.manifests(duckdb.connect(), [path])[str(path)]) == manifest


def test_text_that_is_not_a_manifest_first_is_not_taken_for_one(tmp_path: Path) -> None:
    for name, text in {"escaped key": '{"\\u006danifest": {"partition": "x"}, "lines": []}',
                       "unterminated": '{"manifest": {"partition": "x", "records": ',
                       "array": '[{"manifest": {"partition": "x"}}]',
                       "not followed by a member or the end": '{"manifest": {"partition": "x"} "lines": []}',
                       "not utf-8": '{"manifest": {"partition": "\udcff"}}'}.items():
        path = tmp_path / f"{name}.json"
        path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
        assert raw_files.head_manifest(path) is None, name
