"""Raw evidence files: locate, fingerprint, parse and profile them, with errors that name file, partition and problem."""

from __future__ import annotations

import codecs
import contextlib
import datetime as dt
import hashlib
import json
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import duckdb

from atlasmart_assets import candidates, sql
from atlasmart_assets.alerts.format import window_label
from atlasmart_assets.contract import BATCH_NAME, CONTROL_NAMES
from atlasmart_assets.event_budget import cut_text
from atlasmart_assets.settings import memory_bytes
from atlasmart_assets.warehouse.rows import create_table
from atlasmart_assets.window import Window

# extracted_at too: it becomes the extract's input.as_of, which tells consumers which evidence they read.
MANIFEST_FIELDS = ("partition", "source", "schema_version", "extraction_batch", "extracted_at", "source_high_sequence",
                   "records", "controls")
REQUIRED_FIELDS = ("line_id", "order_id", "customer_id", "sku", "quantity", "unit_price", "unit_cost", "event_time",
                   "source_sequence")

# The scratch's tables of the window's batches (the merge reads them).
SCRATCH_BATCHES_COLUMNS = (("partition_date", "date"), ("batch_id", "varchar"), ("file", "varchar"),
                           ("kind", "varchar"), ("source_high_sequence", "bigint"), ("records", "bigint"),
                           ("controls", "varchar"), ("extracted_at", "varchar"), ("sha256", "varchar"))
REUSED_COLUMNS = (("partition_date", "date"), ("batch_id", "varchar"), ("file", "varchar"))


class RawInputError(Exception):
    """Raw evidence that cannot be loaded; the message names the file, the partition and the problem. `others`:
    more refusals of the window's files found in the same look (every day without its raw file, every misnamed
    batch), which the message counts and the check names one by one."""

    def __init__(self, path: Path, partition: str, problem: str,
                 others: tuple[RawInputError, ...] = ()) -> None:
        kinds = {o.problem for o in others} - {problem}
        more = (f" (and {len(others)} more problem(s)"
                + (f", among them: {cut_text(sorted(kinds)[0], 120)}" if kinds else " of the same kind")
                + f", on {window_label([o.partition for o in others])})" if others else "")
        super().__init__(f"raw partition {partition} ({path}): {problem}{more}")
        self.path, self.partition, self.problem, self.others = path, partition, problem, others

    def __reduce__(self) -> tuple[type, tuple[Path, str, str, tuple[RawInputError, ...]], dict]:
        # Raised in a backfill's scratch process and rebuilt in the step's (pausable.py).
        return type(self), (self.path, self.partition, self.problem, self.others), self.__dict__

    def each(self) -> tuple[RawInputError, ...]:
        return (self, *self.others)


def unreadable(path: Path, partition: str, exc: OSError) -> RawInputError:
    """The refusal of a raw file the system would not let us read (gone, a directory, no permission)."""
    return RawInputError(path, partition, f"cannot be read: {exc.strerror or exc}")


@dataclass(frozen=True)
class RawFile:
    """One landing batch of one day: the flat `partition=D.json` (the first, read as a snapshot) or a later
    `partition=D/<extraction_batch>.json` (delta or snapshot)."""

    partition: str
    path: Path
    sha256: str
    manifest: dict[str, Any]
    read_back: bool = False  # already loaded from this very file: its lines come from the warehouse, not a parse
    # A read-back batch's lines as loaded (raw.batches.lines_fingerprint): what its lines read back must still be.
    lines_fingerprint: str | None = None

    @property
    def controls(self) -> list[float]:
        return [self.manifest["controls"][name] for name in CONTROL_NAMES]

    @property
    def batch_id(self) -> str:
        return str(self.manifest["extraction_batch"])

    @property
    def kind(self) -> str:
        return str(self.manifest.get("kind") or "snapshot")

    @property
    def high_sequence(self) -> int:
        return int(self.manifest["source_high_sequence"])

    def identity(self) -> dict[str, Any]:
        return {"batch": self.batch_id, "sha256": self.sha256, "source_high_sequence": self.high_sequence,
                "kind": self.kind, "extracted_at": self.manifest.get("extracted_at")}


@dataclass(frozen=True)
class Finding:
    """One failed property of one raw file."""

    check: str
    partition: str
    path: Path
    problem: str


def path_for(raw_dir: Path, partition: str) -> Path:
    return raw_dir / f"partition={partition}.json"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprints(paths: dict[Path, str], threads: int | None = None) -> dict[Path, str]:
    """The sha256 of each file (-> its partition), several at a time (hashlib and the reads release the GIL); a
    path that cannot be read is refused naming it."""
    def one(path: Path) -> str:
        try:
            return sha256_of(path)
        except OSError as exc:
            raise unreadable(path, paths[path], exc) from exc

    with ThreadPoolExecutor(max_workers=max(1, threads or os.cpu_count() or 1)) as pool:
        return dict(zip(paths, pool.map(one, paths)))




# DuckDB's JSON reader sizes its read buffers by maximum_object_size (16 MiB at the least) and refuses a document it
# cannot hold in that many bytes. Sized to the largest file of the read, not always the 64 MiB a raw file may
# reach: at the 1 GB memory limit, buffers of 64 MiB were handed back to the system and faulted in again file after
# file (a year's parse into scratch: 9.3-9.6 s against 10.6-11.0 s, of which system time 2.1 s against 4.6-5.1 s).
OBJECT_SIZE_MIN = 16 << 20
OBJECT_SIZE_MAX = 64 << 20


def buffer_for(largest: int) -> int:
    """maximum_object_size for a read whose largest file has `largest` bytes: the smallest power of two that holds
    it (DuckDB reads a document of up to that many bytes), between 16 and 64 MiB."""
    return min(OBJECT_SIZE_MAX, max(OBJECT_SIZE_MIN, 1 << max(largest - 1, 0).bit_length()))


def object_size(paths: Iterable[Path]) -> int:
    """maximum_object_size for reading `paths` (a file past 64 MiB is refused before it is read: `sized`)."""
    return buffer_for(max((p.stat().st_size for p in paths), default=0))


def glob_literal(path: Path) -> str:
    """`path` as DuckDB's file readers take it literally: they expand `*`, `?` and `[...]` in every path they are
    given, so a raw dir named `raw*` also read a sibling `raw-backup` (each line loaded twice), and one named
    `atlas[prod]` read `atlasp`. Each such character is written as a class of itself; `filename` is the real path."""
    return re.sub(r"([*?\[])", r"[\1]", str(path))


def read_params(paths: Iterable[Path], max_object_size: int | None = None) -> dict[str, Any]:
    """The parameters of raw_lines.sql and raw_manifests.sql for reading `paths` (`max_object_size`, when the caller
    has it from `sized`, spares a second look at each file)."""
    paths = list(paths)
    return {"files": [glob_literal(p) for p in paths],
            "max_object_size": object_size(paths) if max_object_size is None else max_object_size}


def file_identities(paths: Mapping[Path, str]) -> dict[Path, tuple[int, int]]:
    """Each file's size and modification time (`_identity`), from one look at it; a file that cannot be looked at, or
    is too large for DuckDB's read, is refused naming it."""
    out = {}
    for path, key in paths.items():
        out[path] = _identity(path, key)
        size = out[path][0]
        if size > OBJECT_SIZE_MAX:
            raise RawInputError(path, key, f"is {size:,} bytes, past the 64 MiB ({OBJECT_SIZE_MAX:,} bytes) a raw "
                                           "file may hold: deliver the day's lines as several batches "
                                           "(raw/partition=D/<extraction_batch>.json)")
    return out


def file_sizes(paths: Mapping[Path, str]) -> dict[Path, int]:
    """Each file's size in bytes, refused as file_identities refuses."""
    return {path: identity[0] for path, identity in file_identities(paths).items()}


def sized(paths: Mapping[Path, str]) -> int:
    """The maximum_object_size for reading `paths` (file_sizes refuses what cannot be read)."""
    return buffer_for(max(file_sizes(paths).values(), default=0))


def later_batches(raw_dir: Path, partition: str) -> list[Path]:
    """The day's later landing batches, raw/partition=D/<extraction_batch>.json (any order; merged by sequence)."""
    folder = raw_dir / f"partition={partition}"
    return sorted(folder.glob("*.json")) if folder.is_dir() else []


def batch_paths(raw_dir: Path, partition: str) -> list[Path]:
    return [path_for(raw_dir, partition), *later_batches(raw_dir, partition)]


def batch_set_version(raw_dir: Path, partition: str) -> str | None:
    """A version of the day's batch set on disk (names and sizes: batches are immutable, so a new version means a
    new batch); None when the day has no evidence."""
    paths = [p for p in batch_paths(raw_dir, partition) if p.is_file()]
    if not paths:
        return None
    digest = hashlib.sha256("\n".join(f"{p.name}:{p.stat().st_size}" for p in paths).encode()).hexdigest()
    return f"{len(paths)}-{digest[:16]}"


# The manifest as every extractor writes it: the document's first member, within its first 64 KiB.
_MANIFEST_FIRST = re.compile(r'[ \t\r\n]*\{[ \t\r\n]*"manifest"[ \t\r\n]*:[ \t\r\n]*')
HEAD_BYTES = 1 << 16


def head_manifest(path: Path) -> str | None:
    """The manifest's JSON text read from the file's head, when it is the document's first member and ends
    within HEAD_BYTES; None otherwise (the caller then has DuckDB read it from the whole document). Reading the
    head spares a second parse of every file (120 days x 20,000 lines: 0.74-1.21 s in DuckDB, 5-7 ms here). What
    follows the manifest is not looked at here: the lines' own read refuses a file that is not one well-formed
    document, and the profile holds each file's lines to this manifest's partition and batch."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
        # An incremental decoder keeps a character cut at the end of the head back instead of failing on it.
        text = codecs.getincrementaldecoder("utf-8")().decode(head)
    except (OSError, UnicodeDecodeError):
        return None
    start = _MANIFEST_FIRST.match(text)
    if start is None:
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(text, start.end())
    except json.JSONDecodeError:
        return None
    if not text[end:].lstrip(" \t\r\n").startswith((",", "}")):
        return None
    return text[start.end():end]


def manifests(con: duckdb.DuckDBPyConnection, files: list[Path], max_object_size: int | None = None) -> dict[str, str]:
    """Each file's manifest header as JSON text (None for a document without one): from its head where the manifest
    comes first (head_manifest), else read by DuckDB from the whole document."""
    heads = {str(path): text for path in files for text in [head_manifest(path)] if text is not None}
    rest = [str(path) for path in files if str(path) not in heads]
    if rest:
        heads.update(dict(con.execute(sql.text("raw_manifests"),
                                      read_params(map(Path, rest), max_object_size)).fetchall()))
    return heads


MISSING = "raw file is missing (no evidence was extracted for this day)"
# What a day's entry in the check's figures says of a missing file: a year of days without one fits the figures'
# budget (event_budget.py) named one by one, where the whole sentence a day was cut after about half of them.
MISSING_FIGURE = "raw file missing"


def figure_of(problem: str) -> str:
    """A problem as one day's entry in its check's figures."""
    return MISSING_FIGURE if problem == MISSING else problem


def _locate(raw_dir: Path, window: Window) -> dict[Path, str]:
    """Every batch file of the window -> its partition; the day's first batch must exist and every later one be
    named as a batch. Every such problem of the window is named at once (missing days and misnamed batches alike):
    an operator mends them all before one run again, not one per run."""
    paths: dict[Path, str] = {}
    problems: list[RawInputError] = []
    for key in window.keys:
        first = path_for(raw_dir, key)
        present = first.is_file()  # looked at once: a file that vanished between two looks must not pass
        if not present:
            problems.append(RawInputError(first, key, MISSING))
        for path in batch_paths(raw_dir, key):
            if path == first and not present:
                continue
            if path != first and not BATCH_NAME.fullmatch(path.stem):
                problems.append(RawInputError(path, key, "a batch file is named <extraction_batch>.json (letters, "
                                                         "digits, '_', '.', '-')"))
                continue
            paths[path] = key
    if problems:
        head = problems[0]
        raise RawInputError(head.path, head.partition, head.problem, tuple(problems[1:]))
    return paths


def _mistyped(line: dict[str, Any]) -> str | None:
    """Why a typed field of one line cannot be read, or None."""
    for name in ("quantity", "source_sequence"):
        value = line.get(name)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool)):
            return f"{name} {value!r} is not an integer"
    for name in ("unit_price", "unit_cost"):
        value = line.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            return f"{name} {value!r} is not a number"
    value = line.get("event_time")
    if value is not None:
        try:
            dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return f"event_time {value!r} is not an ISO timestamp"
    return None


# What parsing one document holds while a thread reads it (yyjson's tree of it, DuckDB's vectors of its lines), as a
# multiple of its size, with room: a 54 MB document of 240,000 lines needed 400-512 MB on one thread and two of them
# 1.0-1.2 GB on two, in memory; into the scratch, two threads ran out of 1 GB (2026-12-06). A window of such files
# read on every core ran out of DuckDB's 1 GB and was refused as unreadable.
PARSE_MEMORY_PER_BYTE = 12
# Past DuckDB's smallest buffer a file is read apart from the window's smaller ones, whose statement takes the threads
# their own largest allows (a year of 4.4 MB files: every core up to 11 at 1 GB, thread_memory).
LARGE_FILE = OBJECT_SIZE_MIN


class ParseMemoryError(RuntimeError):
    """The window's files are sound but DuckDB's memory limit cannot hold their parse: a setting to change (or
    smaller batches to deliver), not bad input."""


def _out_of_memory(files: int, largest: int, window: Window, error: Exception) -> ParseMemoryError:
    return ParseMemoryError(f"raw {window}: DuckDB ran out of memory parsing {files} raw file(s) of up to "
                            f"{largest:,} bytes (ATLASMART_DUCKDB_MEMORY_LIMIT; one thread needs about "
                            f"{PARSE_MEMORY_PER_BYTE} times the largest file, and twice its read buffer: "
                            f"{thread_memory(largest):,} bytes): raise the limit, or deliver the days "
                            f"as smaller batches; nothing was loaded. DuckDB: {cut_text(str(error), 300)}")


def _size_groups(sizes: Mapping[Path, int]) -> list[dict[Path, int]]:
    """The files to parse (-> size), small ones (up to LARGE_FILE) apart from large ones, each group read in one
    statement."""
    small = {p: n for p, n in sizes.items() if n <= LARGE_FILE}
    large = {p: n for p, n in sizes.items() if n > LARGE_FILE}
    return [group for group in (small, large) if group]


def memory_limit_bytes(con: duckdb.DuckDBPyConnection) -> int:
    """The connection's memory limit in bytes (DuckDB shows it as e.g. '953.6 MiB')."""
    return memory_bytes(str(con.execute("select current_setting('memory_limit')").fetchone()[0]))


def thread_memory(largest: int) -> int:
    """What one thread of the parse takes for a file of `largest` bytes: the document's values
    (PARSE_MEMORY_PER_BYTE times the file) and the JSON reader's two buffers of maximum_object_size each, which it
    allocates whatever the file's size (a window of 3 KB files on 8 threads ran out of 100 MB)."""
    return PARSE_MEMORY_PER_BYTE * largest + 2 * buffer_for(largest)


@contextlib.contextmanager
def _threads_for(con: duckdb.DuckDBPyConnection, largest: int) -> Iterator[None]:
    """As many of the connection's threads as the memory limit holds the parse of a file of `largest` bytes on
    (thread_memory), one at the least; the connection's own afterwards."""
    threads = int(con.execute("select current_setting('threads')").fetchone()[0])
    fits = max(1, memory_limit_bytes(con) // thread_memory(largest))
    if fits >= threads:
        yield
        return
    con.execute(f"set threads = {int(fits)}")
    try:
        yield
    finally:
        with contextlib.suppress(duckdb.Error):  # in a failed transaction: the read's own error is the one to raise
            con.execute(f"set threads = {threads}")


def _strict_problem(path: Path, key: str) -> RawInputError | None:
    """What a strict reader finds wrong with the file (its bytes, its JSON, its lines' types), or None."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        return unreadable(path, key, exc)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return RawInputError(path, key, f"not valid UTF-8: byte 0x{data[exc.start]:02x} at offset {exc.start}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        return RawInputError(path, key, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}")
    if not isinstance(doc, dict) or not isinstance(doc.get("lines"), list):
        return RawInputError(path, key, "not a raw partition document (expected an object with 'manifest' and a 'lines' list)")
    for i, line in enumerate(doc["lines"]):
        if not isinstance(line, dict):
            return RawInputError(path, key, f"line {i} is not an object")
        bad = _mistyped(line)
        if bad:
            return RawInputError(path, key, f"line {i} ({_shown(line.get('line_id'))}): {bad}")
    return None


def _explain_parse_failure(con: duckdb.DuckDBPyConnection, paths: dict[Path, str],
                           error: Exception) -> RawInputError:
    # DuckDB's message names the file it could not read: that one is looked at, and blamed, first (another file
    # the strict reader dislikes but DuckDB read is not what failed the read).
    named = [(p, k) for p, k in paths.items() if str(p) in str(error)]
    for path, key in named or paths.items():
        problem = _strict_problem(path, key)
        if problem is not None:
            return problem
    if named:
        path, key = named[0]
        return RawInputError(path, key, f"DuckDB could not read this raw file: {cut_text(str(error), 1000)}")
    # A value DuckDB cannot take (a cast's message names no file): read the files one at a time to find it, which
    # costs a refused window what its read cost, never a clean one.
    for path, key in paths.items():
        try:
            con.execute(f"create or replace temp table raw_probe as {sql.text('raw_lines')}", read_params([path]))
        except (duckdb.Error, OSError) as exc:
            return RawInputError(path, key, f"DuckDB could not read this raw file: {exc}")
        finally:
            with contextlib.suppress(duckdb.Error):  # a connection in a failed transaction: the answer still stands
                con.execute("drop table if exists raw_probe")
    days = sorted(set(paths.values()))
    first = next(iter(paths))
    # Not a file's fault (a full disk, say): the window's files named by the first and their count, not one by one.
    return RawInputError(Path(f"{first} and {len(paths) - 1} other file(s)") if len(paths) > 1 else first,
                         str(Window.of(days[0], days[-1])),
                         f"DuckDB could not read the window's raw files: {cut_text(str(error), 1000)}")


def _shown(value: Any) -> str:
    """A manifest value as a refusal quotes it: its JSON, cut (a hostile value can be megabytes long)."""
    return cut_text(json.dumps(value, ensure_ascii=False), 120)


def _is_timestamp(value: Any) -> bool:
    """An ISO 8601 date and time (a UTC offset or Z optional), as extracted_at is written: it becomes the extract's
    input.as_of, which consumers read as a time."""
    if not isinstance(value, str) or len(value) > 64 or value[10:11] not in ("T", "t", " "):
        return False
    try:
        candidates.extracted_instant(value)
    except ValueError:
        return False
    return True


def _manifest(path: Path, partition: str, text: str, first: bool) -> dict[str, Any]:
    manifest = json.loads(text) if text else None
    if not isinstance(manifest, dict):
        raise RawInputError(path, partition, "manifest header is missing")
    missing = [f for f in MANIFEST_FIELDS if manifest.get(f) is None]
    if missing:
        raise RawInputError(path, partition, f"manifest lacks {', '.join(missing)}")
    if manifest["partition"] != partition:
        raise RawInputError(path, partition, f"manifest says partition {_shown(manifest['partition'])}, file name says "
                                             f"{partition}")
    controls = manifest["controls"]
    if not isinstance(controls, dict):
        raise RawInputError(path, partition, "manifest controls are not an object of the six named controls")
    absent = [c for c in CONTROL_NAMES if controls.get(c) is None]
    if absent:
        raise RawInputError(path, partition, f"manifest controls lack {', '.join(absent)}")
    mistyped = [c for c in CONTROL_NAMES if isinstance(controls[c], bool) or not isinstance(controls[c], (int, float))]
    if mistyped:
        raise RawInputError(path, partition, f"manifest controls {', '.join(mistyped)} are not numbers")
    for name in ("records", "source_high_sequence"):
        if isinstance(manifest[name], bool) or not isinstance(manifest[name], int):
            raise RawInputError(path, partition, f"manifest {name} {_shown(manifest[name])} is not an integer")
        if not -(1 << 63) <= manifest[name] < (1 << 63) or (name == "records" and manifest[name] < 0):
            raise RawInputError(path, partition, f"manifest {name} {_shown(manifest[name])} is out of range (a "
                                                 "64-bit integer" + (", not negative)" if name == "records" else ")"))
    batch = manifest["extraction_batch"]
    if not isinstance(batch, str) or not BATCH_NAME.fullmatch(batch):
        raise RawInputError(path, partition, f"manifest extraction_batch {_shown(batch)} is not a batch name (1-128 "
                                             "letters, digits, '_', '.', '-', starting with a letter or digit)")
    stamp = manifest["extracted_at"]
    if not _is_timestamp(stamp):
        raise RawInputError(path, partition, f"manifest extracted_at {_shown(stamp)} is not an ISO 8601 timestamp "
                                             "(e.g. 2026-09-02T01:00:00Z)")
    kind = "snapshot" if first else manifest.get("kind", "delta")
    if kind not in ("delta", "snapshot"):
        raise RawInputError(path, partition, f"manifest kind {_shown(kind)} is neither 'delta' nor 'snapshot'")
    if not first and batch != path.stem:
        raise RawInputError(path, partition, f"manifest extraction_batch {_shown(batch)} differs from the file name "
                                             f"{path.name!r}")
    return {**manifest, "kind": kind}


def _identity(path: Path, partition: str) -> tuple[int, int]:
    """The file's size and modification time: a write changes at least one of them (within the file system's clock
    tick), where its inode and change time also move with a hard link, a chmod or an extended attribute."""
    try:
        st = path.stat()
    except OSError as exc:
        raise unreadable(path, partition, exc) from exc
    return st.st_size, st.st_mtime_ns


def _loaded_file(partition: str, path: Path, sha256: str, seen: Mapping[str, Any]) -> RawFile:
    """A batch already loaded from a byte-identical file: its manifest as recorded when it was loaded."""
    manifest = {"partition": partition, "extraction_batch": seen["batch_id"], "kind": seen["kind"],
                "source_high_sequence": int(seen["source_high_sequence"]), "records": int(seen["records"]),
                "controls": dict(zip(CONTROL_NAMES, json.loads(seen["controls"]))),
                "extracted_at": seen["extracted_at"]}
    return RawFile(partition, path, sha256, manifest, read_back=True, lines_fingerprint=seen["lines_fingerprint"])


def load_window(con: duckdb.DuckDBPyConnection, raw_dir: Path, window: Window,
                loaded: Mapping[str, Mapping[str, Any]] | None = None,
                threads: int | None = None) -> list[RawFile]:
    """Fingerprint every landing batch of the window and parse it into the scratch tables candidate.raw_lines (one
    row per record, with its batch) and candidate.raw_batches (one row per batch). Except a batch `read_back`:
    `loaded` (the warehouse's record of each loaded batch, by file, with the rows it holds) says its file has the
    sha256 it was loaded with and every one of its lines is in the warehouse; its lines are the caller's to read
    back (candidate.reused_batches lists them)."""
    paths = _locate(raw_dir, window)
    # What each file was when it was fingerprinted: the parse must read those bytes (checked after it). A file too
    # large, or that cannot be looked at, is refused here, before anything is read.
    identities = file_identities(paths)
    shas = fingerprints(paths, threads)
    reused = {path: _loaded_file(key, path, shas[path], seen) for path, key in paths.items()
              for seen in [(loaded or {}).get(str(path))]
              if seen and seen["sha256"] == shas[path] and seen["loaded_rows"] == seen["records"]
              and seen["fingerprint_current"]}
    parse = {path: key for path, key in paths.items() if path not in reused}
    con.execute(sql.text("raw_lines_table"))
    headers: dict[str, str] = {}
    for group in _size_groups({path: identities[path][0] for path in parse}):
        largest = max(group.values())
        buffer = buffer_for(largest)
        try:
            with _threads_for(con, largest):
                headers.update(manifests(con, list(group), buffer))
                con.execute(f"insert into candidate.raw_lines by name {sql.text('raw_lines')}",
                            read_params(group, buffer))
        except duckdb.OutOfMemoryException as exc:
            raise _out_of_memory(len(group), largest, window, exc) from exc
        except duckdb.Error as exc:
            raise _explain_parse_failure(con, {p: parse[p] for p in group}, exc) from exc
    for path, key in parse.items():
        # A size or modification time that moved is looked at again: only other bytes refuse the file (a backup's
        # hard link or a chmod change none of these, and a rewrite of the same bytes is the same evidence).
        if _identity(path, key) != identities[path] and sha256_of(path) != shas[path]:
            raise RawInputError(path, key, "the file changed while it was read (its bytes are not those whose sha256 "
                                           "was taken): a landing batch is written elsewhere and moved into raw/ "
                                           "whole; run again once it is complete")
    out = []
    for path, key in paths.items():
        if path in reused:
            out.append(reused[path])
            continue
        first = path == path_for(raw_dir, key)
        out.append(RawFile(key, path, shas[path], _manifest(path, key, headers.get(str(path), ""), first)))
    seen_batches: dict[tuple[str, str], Path] = {}
    for rf in out:
        other = seen_batches.setdefault((rf.partition, rf.batch_id), rf.path)
        if other != rf.path:
            raise RawInputError(rf.path, rf.partition, f"extraction_batch {rf.batch_id!r} is also {other}")
    latest: dict[str, RawFile] = {}
    for rf in sorted(out, key=_latest_order):
        prev = latest.get(rf.partition)
        if prev is not None and prev.high_sequence == rf.high_sequence and prev.controls != rf.controls:
            raise RawInputError(rf.path, rf.partition, f"source_high_sequence {rf.high_sequence} is also that of batch "
                                                       f"{prev.batch_id} ({prev.path}), whose controls differ: which "
                                                       "one the day reconciles to is ambiguous (a later extraction "
                                                       "carries a higher source_high_sequence)")
        latest[rf.partition] = rf
    record_batches(con, out)
    create_table(con, "candidate.reused_batches", REUSED_COLUMNS,
                 [(dt.date.fromisoformat(f.partition), f.batch_id, str(f.path)) for f in reused.values()])
    return out


def record_batches(con: duckdb.DuckDBPyConnection, files: list[RawFile]) -> None:
    """candidate.raw_batches: the window's batches as the merge reads them."""
    create_table(con, "candidate.raw_batches", SCRATCH_BATCHES_COLUMNS, [
        (dt.date.fromisoformat(f.partition), f.batch_id, str(f.path), f.kind, f.high_sequence, f.manifest["records"],
         json.dumps(f.controls), f.manifest.get("extracted_at"), f.sha256) for f in files])


def _num(value: Any) -> float:
    return float(value) if value is not None else 0.0


def _latest_order(f: RawFile) -> tuple[str, int, str]:
    return f.partition, f.high_sequence, f.batch_id


def target(files: list[RawFile]) -> dict[str, RawFile]:
    """Per day, the batch whose controls the day reconciles to: the one with the highest source_high_sequence, and
    of batches tied on it (their controls are equal: load_window refuses others) the last by batch id, as
    candidates.evidence picks it."""
    return {f.partition: f for f in sorted(files, key=_latest_order)}


def _foreign_lines(rf: RawFile, fig: Mapping[str, Any]) -> str | None:
    """Why some of the file's lines are not its manifest's (read under another document's partition or batch), or
    None: a raw file is one document, and every line of it belongs to its manifest's day and batch."""
    if not fig.get("records"):
        return None
    named = {(str(fig["first_partition"]), fig["first_batch"]), (str(fig["last_partition"]), fig["last_batch"])}
    if not fig.get("unnamed") and named == {(rf.partition, rf.batch_id)}:
        return None
    return (f"its lines are read under partition(s) {fig['first_partition']}..{fig['last_partition']} and batch(es) "
            f"{fig['first_batch']!r}..{fig['last_batch']!r}, not only its manifest's (partition {rf.partition}, batch "
            f"{rf.batch_id!r}): a raw file holds one document, its manifest and lines")


@dataclass
class Measures:
    """What the profile reads off a set of batches' lines: per batch file its figures (raw_profile.sql), the
    merge's conflicts (day, line_id, sequence, batches) and the merged controls per day (day_controls.sql). Those
    of disjoint sets of days (the lines in the run's scratch, a chunk profiled where it is loaded) add up."""

    by_file: dict[str, dict[str, Any]] = field(default_factory=dict)
    conflicts: list[tuple[Any, ...]] = field(default_factory=list)
    merged: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # (day, batch) -> the fingerprint of the lines of each batch read back rather than parsed.
    fingerprints: dict[tuple[str, str], str] = field(default_factory=dict)

    def add(self, other: Measures) -> None:
        self.by_file.update(other.by_file)
        self.conflicts.extend(other.conflicts)
        self.merged.update(other.merged)
        self.fingerprints.update(other.fingerprints)


# The lines of the batches read back (candidate.reused_batches), whose fingerprints are compared with raw.batches'.
READ_BACK_LINES = ("(select r.* from candidate.raw_lines r semi join candidate.reused_batches b "
                   "on r.partition_date = b.partition_date and r.extraction_batch = b.batch_id)")


def measure(con: duckdb.DuckDBPyConnection, all_read_back: bool = False) -> Measures:
    """The measures of the lines in `con`'s candidate.raw_lines, merged (candidates.merge_evidence leaves the merge
    in `con`'s candidate schema for the build). `all_read_back`: every line is a read-back batch's (a chunk profiled
    where it is loaded), so the fingerprints need not pick them out (a year's: 0.5 s against 0.8 s)."""
    cur = con.execute(sql.text("raw_profile"))
    names = [d[0] for d in cur.description]
    by_file = {row[0]: dict(zip(names, row)) for row in cur.fetchall()}
    repeated = candidates.merge_evidence(con)
    # Two records of one key and sequence are two records of one key: with no key repeated, nothing to compare.
    conflicts = con.execute(sql.text("merge_conflicts")).fetchall() if repeated else []
    # Lines read under no manifest's day (a second document without one) have no day: the file's profile names
    # them (raw_order_lines_match_manifest), and they merge into none.
    merged = {r[0].isoformat(): r[1:] for r in con.execute(sql.text("day_controls")).fetchall() if r[0] is not None}
    # A first load reads nothing back: no pass over its lines. A read-back batch without lines has no group: it is
    # taken for the empty batch it should be (assess).
    fingerprints = {(d.isoformat(), b): fp for d, b, fp in con.execute(
        sql.text("batch_lines_fingerprints").format(lines="candidate.raw_lines" if all_read_back else READ_BACK_LINES)
    ).fetchall()} if con.execute("select count(*) from candidate.reused_batches").fetchone()[0] else {}
    return Measures(by_file, [c for c in conflicts if c[0] is not None], merged, fingerprints)


def profile(con: duckdb.DuckDBPyConnection, raw_files: list[RawFile],
            elsewhere: Measures | None = None) -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """Per day figures of the merged evidence, and every shape, count, merge or control problem found in the
    window's batches (each finding names the batch file that is wrong). The lines are those of `con`'s
    candidate.raw_lines; `elsewhere`: the measures of the days whose lines were profiled where they are loaded."""
    found = measure(con)
    if elsewhere is not None:
        found.add(elsewhere)
    return assess(raw_files, found)


# How batch_lines_fingerprints.sql ends the fingerprint of a batch without lines (after DuckDB's version).
EMPTY_FINGERPRINT_END = ": 0 lines, hash sum 0"


def _empty(rf: RawFile) -> str | None:
    """What a read-back batch whose lines were not found measures as: the empty batch it was loaded as, if it was
    (its recorded fingerprint is then of this release, or it would not have been read back), else no lines."""
    loaded = rf.lines_fingerprint
    return loaded if loaded is not None and loaded.endswith(EMPTY_FINGERPRINT_END) else None


def assess(raw_files: list[RawFile], found: Measures) -> tuple[dict[str, dict[str, Any]], list[Finding]]:
    """Per day figures and the findings of the window's batches, from the measures of their lines."""
    by_file = found.by_file
    findings: list[Finding] = []
    for rf in raw_files:
        fig = by_file.get(str(rf.path), {"records": 0})
        gaps = [f"{fig[f'missing_{f}']} lines lack {f}" for f in REQUIRED_FIELDS if fig.get(f"missing_{f}")]
        if gaps:
            findings.append(Finding("raw_order_lines_required_fields_present", rf.partition, rf.path,
                                    "; ".join(gaps) + f" (schema_version {_shown(rf.manifest.get('schema_version'))})"))
        if fig.get("invalid_values"):
            findings.append(Finding("raw_order_lines_values_valid", rf.partition, rf.path,
                                    f"{fig['invalid_values']} lines hold invalid values, e.g. {fig['first_invalid']}"))
        foreign = _foreign_lines(rf, fig)
        if foreign:
            findings.append(Finding("raw_order_lines_match_manifest", rf.partition, rf.path, foreign))
        if fig.get("max_sequence") is not None and fig["max_sequence"] > rf.high_sequence:
            findings.append(Finding("raw_order_lines_match_manifest", rf.partition, rf.path,
                                    f"its lines reach source_sequence {fig['max_sequence']}, above the manifest's "
                                    f"source_high_sequence {rf.high_sequence}: the manifest does not say which "
                                    "evidence the batch holds"))
        if fig.get("records", 0) != rf.manifest["records"]:
            findings.append(Finding("raw_order_lines_match_manifest", rf.partition, rf.path,
                                    f"manifest says records={rf.manifest['records']}, the batch holds "
                                    f"{fig.get('records', 0)} lines"))
        if rf.read_back and found.fingerprints.get((rf.partition, rf.batch_id), _empty(rf)) != rf.lines_fingerprint:
            findings.append(Finding("raw_order_lines_match_manifest", rf.partition, rf.path,
                                    f"batch {rf.batch_id}: the warehouse's copy of its lines differs from what was "
                                    f"loaded from this unchanged file (loaded {rf.lines_fingerprint}; now "
                                    f"{found.fingerprints.get((rf.partition, rf.batch_id), 'no lines')}): delete "
                                    "the batch's lines from raw.order_lines and run again, and it is loaded again "
                                    "from its file"))
    path_of = {(f.partition, f.batch_id): f.path for f in raw_files}
    for day, line_id, sequence, batches in found.conflicts:
        files = [str(path_of.get((day.isoformat(), b), b)) for b in batches]
        findings.append(Finding("raw_order_lines_merge_deterministic", day.isoformat(), Path(files[0]),
                                f"line {line_id} at source_sequence {sequence} has different content in "
                                f"{' and '.join(files) if len(files) > 1 else files[0] + ' (twice)'}: which one wins "
                                "is not determined"))
    merged = found.merged
    figures: dict[str, dict[str, Any]] = {}
    for day, rf in sorted(target(raw_files).items()):
        got = merged.get(day)
        controls = [_num(x) for x in got] if got else [0.0] * 6
        day_files = [f for f in raw_files if f.partition == day]
        figures[day] = {"records": sum(int(by_file.get(str(f.path), {}).get("records", 0)) for f in day_files),
                        "controls": controls, "batches": [f.identity() for f in
                                                          sorted(day_files, key=lambda f: f.high_sequence)]}
        expected = [float(x) for x in rf.controls]
        if controls != expected:
            findings.append(Finding(
                "raw_order_lines_match_manifest", day, rf.path,
                f"manifest says controls={expected} for the day as of batch {rf.batch_id}, the merged batches "
                f"({len(day_files)}) give controls={controls}" + _read_back_note(day_files, found)))
    return figures, findings


def _read_back_note(day_files: list[RawFile], found: Measures) -> str:
    """Which of a refused day's batches were read back from the warehouse rather than parsed, and whether their
    lines are still as they were loaded: a mismatch is the parsed batches' or the manifest's unless they are not."""
    read_back = [f for f in day_files if f.read_back]
    if not read_back:
        return ""
    changed = [f.batch_id for f in read_back
               if found.fingerprints.get((f.partition, f.batch_id), _empty(f)) != f.lines_fingerprint]
    if changed:
        return (f" (the warehouse's copy of {', '.join(changed)} differs from what was loaded from its file: see "
                "that finding)")
    parsed = [f.batch_id for f in day_files if not f.read_back]
    return (f" (the lines of {', '.join(f.batch_id for f in read_back)} were read back from raw.order_lines, "
            f"unchanged since they were loaded from their files; parsed now: {', '.join(parsed) or 'none'})")
