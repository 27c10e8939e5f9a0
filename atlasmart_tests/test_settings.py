"""The environment contract is checked when the code location loads: a bad value is one error naming the
variable and what it expects, never a run or a sensor failing on it later."""

import subprocess
import sys

import pytest

from atlasmart_assets import settings

BAD = [
    ("ATLASMART_SLO_DURATION_S", "10m"), ("ATLASMART_SLO_QUEUE_WAIT_S", "nan"), ("ATLASMART_FLAG_ALERT_AFTER_S", "-5"),
    ("ATLASMART_LOCK_TIMEOUT_S", "inf"), ("ATLASMART_RETAIN_VERSIONS", "2.5"), ("ATLASMART_RETAIN_VERSIONS", "0"),
    ("ATLASMART_SHRINK_THRESHOLD", "1.5"), ("ATLASMART_BACKFILL_THREADS", "all"),
    ("ATLASMART_SENSOR_INTERVAL_S", "0"), ("ATLASMART_FRESHNESS_DEADLINE", "6am"),
    ("ATLASMART_FRESHNESS_DEADLINE", "48:00"), ("ATLASMART_START_DATE", "yesterday"), ("ATLASMART_CHUNK_DAYS", "0"),
    ("ATLASMART_BACKFILL_NICE", "20"), ("ATLASMART_BACKFILL_NICE", "-1"), ("ATLASMART_BACKFILL_GIVE_WAY_S", "-1"),
    ("ATLASMART_SCHEDULE_HOUR", "24"), ("ATLASMART_SCHEDULE_HOUR", "2.5"), ("ATLASMART_SCHEDULE_HOUR", "-1"),
    ("ATLASMART_DUCKDB_MEMORY_LIMIT", "lots"), ("ATLASMART_DUCKDB_MEMORY_LIMIT", "1GB'; drop table x"),
    ("ATLASMART_DUCKDB_MEMORY_LIMIT", "1000"), ("ATLASMART_DUCKDB_MEMORY_LIMIT", "1MB"),
    # DuckDB refuses these (every run failed on them at its first connection), or no parse could run in them.
    ("ATLASMART_DUCKDB_MEMORY_LIMIT", "150%"), ("ATLASMART_DUCKDB_MEMORY_LIMIT", "1000%"),
    ("ATLASMART_DUCKDB_MEMORY_LIMIT", "١GB"), ("ATLASMART_DUCKDB_MEMORY_LIMIT", "16MB"),
]


@pytest.mark.parametrize("name, value", BAD)
def test_a_bad_setting_is_refused_naming_the_variable_and_its_value(name: str, value: str) -> None:
    with pytest.raises(ValueError) as err:
        settings.load({name: value})
    assert name in str(err.value) and repr(value) in str(err.value), str(err.value)


def test_the_defaults_and_good_values_load() -> None:
    cfg = settings.load({"ATLASMART_SLO_DURATION_S": "90.5", "ATLASMART_FRESHNESS_DEADLINE": " 30:15 ",
                         "ATLASMART_SHRINK_THRESHOLD": "0"})
    assert cfg.slo_duration_s == 90.5 and cfg.freshness_deadline == "30:15" and cfg.shrink_threshold == 0
    assert settings.load().freshness_deadline == "06:00"
    for limit, size in (("2GB", 2 * 10**9), ("512MiB", 512 << 20), ("1.5 gb", 15 * 10**8), (" 256MB ", 256 * 10**6),
                        ("4G", 4 * 10**9), ("512m", 512 * 10**6)):
        assert settings.memory_bytes(settings.load({"ATLASMART_DUCKDB_MEMORY_LIMIT": limit}).duckdb_memory_limit) == size
    # Every form DuckDB takes is taken, and means to us what it means to DuckDB.
    import duckdb
    for limit in ("1 gigabyte", "2gigabytes", ".5GB", "1e9B", "2000TB", "64MB"):  # DuckDB's forms, DuckDB's sizes
        shown = settings.duckdb_memory_limit(settings.load({"ATLASMART_DUCKDB_MEMORY_LIMIT": limit}).duckdb_memory_limit)
        assert settings.memory_bytes(shown) > 0, (limit, shown)
    for limit in ("4G", "1.5 gb", "512MiB", "50%", "-1"):
        con = duckdb.connect(config={"memory_limit": settings.load({"ATLASMART_DUCKDB_MEMORY_LIMIT": limit}).duckdb_memory_limit})
        shown = con.execute("select current_setting('memory_limit')").fetchone()[0]
        ours = settings.memory_bytes(limit)
        unit, name = next((1 << k, n) for k, n in ((40, "TiB"), (30, "GiB"), (20, "MiB")) if ours >= 1 << k)
        assert shown == f"{int(ours / unit * 10) / 10:.1f} {name}", (limit, shown, ours)  # DuckDB truncates


def test_the_code_location_refuses_to_load_with_a_bad_deadline(tmp_path) -> None:
    """Loaded in a fresh interpreter, as Dagster loads it: the error names the variable (before, the freshness
    check raised inside every materialization of the mart and failed each backfill after it had published)."""
    env = {"PATH": "/usr/bin:/bin", "ATLASMART_DATA_DIR": str(tmp_path), "ATLASMART_FRESHNESS_DEADLINE": "6am",
           "DAGSTER_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", "import atlasmart_assets.definitions"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "ATLASMART_FRESHNESS_DEADLINE='6am' is not an offset HH:MM" in done.stderr


@pytest.mark.parametrize("hour, cron", [(None, "0 2 * * *"), ("0", "0 0 * * *"), ("17", "0 17 * * *")])
def test_the_daily_schedule_runs_at_the_configured_hour(tmp_path, hour, cron) -> None:
    """ATLASMART_SCHEDULE_HOUR (UTC, default 2) is the daily schedule's hour, read when the code location loads."""
    env = {"PATH": "/usr/bin:/bin", "ATLASMART_DATA_DIR": str(tmp_path), "DAGSTER_HOME": str(tmp_path)}
    if hour is not None:
        env["ATLASMART_SCHEDULE_HOUR"] = hour
    done = subprocess.run([sys.executable, "-c", "from atlasmart_assets.definitions import defs; s = defs.resolve_schedule_def('atlasmart_daily_schedule'); "
                           "print(s.cron_schedule, s.execution_timezone or 'UTC')"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[-2] == f"{cron} UTC", done.stdout


@pytest.mark.parametrize("value", ["maybe", "of", "2"])
def test_a_switch_that_is_neither_on_nor_off_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """ATLASMART_CATCH_UP=maybe was taken for on (a review): a switch's typo must not leave it in its default."""
    monkeypatch.setenv("ATLASMART_CATCH_UP", value)
    with pytest.raises(ValueError, match=f"ATLASMART_CATCH_UP='{value}' is neither on"):
        settings.load()
    monkeypatch.setenv("ATLASMART_CATCH_UP", " OFF ")
    assert settings.load().catch_up is False
