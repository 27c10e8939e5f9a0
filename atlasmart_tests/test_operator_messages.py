"""What the operator is told agrees with what happened: the notice, Slack and the command line, for the cases a
review of 2026-12-07 found them disagreeing (each test failed on the code before its fix)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from atlasmart_assets.lab import run_chain  # noqa: E402
from atlasmart_assets.resources import Warehouse  # noqa: E402
from slack_server import SlackServer, rendered  # noqa: E402

TOKEN = "xoxb-review-token"
LIFECYCLE = "atlasmart_backfill_lifecycle_to_slack"


def _slack(server: SlackServer, **kw: Any) -> Any:
    from atlasmart_assets.alerts.slack import AtlasSlack
    return AtlasSlack(token=TOKEN, ui_base_url="http://ui.test", base_url=server.base_url, timeout_s=1, **kw)


def _tick(sensor_name: str, instance: dg.DagsterInstance, slack: Any, cursor: str | None = None) -> Any:
    from atlasmart_assets.definitions import defs
    ctx = dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs,
                                  resources={"slack": slack, "warehouse": Warehouse()})
    return defs.resolve_sensor_def(sensor_name).evaluate_tick(ctx)


def test_a_backfill_of_two_runs_notice_lists_the_input_evidence_of_every_day(env, instance) -> None:
    """A backfill Dagster runs as several runs (a scattered window under the single-run policy is one run per
    contiguous range): each run's publish rewrites notices/<backfill>.md, which covers all the backfill's
    publications, but its "Input evidence" only the last run's days."""
    bf = "bf-scattered"
    assert run_chain(instance, "2026-09-15", "2026-09-15", {"dagster/backfill": bf}).success
    assert run_chain(instance, "2026-09-18", "2026-09-18", {"dagster/backfill": bf}).success
    text = (env.notices_dir / f"{bf}.md").read_text()
    days = [line for line in text.splitlines() if line.startswith("| [")]
    assert len(days) == 2, text  # both days are in the notice's table
    evidence = text.split("## Input evidence")[1]
    assert "- 2026-09-18:" in evidence
    assert "- 2026-09-15:" in evidence, evidence


def test_slack_published_message_counts_a_day_a_backfill_published_twice_once(env, instance, published) -> None:
    """Two runs of one backfill publish the same day (a run retried or re-executed while the backfill is on):
    the change notice shows the day once (before its first, after its last), but Slack's "Correction published"
    counts it twice and lists it both as changed and as unchanged."""
    bf = "bf-twice"
    # What was published before the backfill (the sensor reads only the backfill's runs and the ledger).
    published(("2026-09-18", "2026-09-20"))
    from atlasmart_assets import lab
    lab.publish_legacy_incident(Warehouse())  # cost 435 on 2026-09-20
    assert run_chain(instance, "2026-09-20", "2026-09-20", {"dagster/backfill": bf}).success
    assert run_chain(instance, "2026-09-20", "2026-09-20", {"dagster/backfill": bf}).success  # the retry
    with SlackServer() as server:
        _tick(LIFECYCLE, instance, _slack(server))
    message = next(rendered(m) for m in server.messages if "Correction published" in m["text"])
    notice = (env.notices_dir / f"{bf}.md").read_text()
    assert "- Days republished: 1;" in notice  # the notice: one day
    assert "1 partition(s) republished, content changed in 1" in message, message
    assert "Content unchanged" not in message, message


# --- Slack heads past a section's 3,000 characters -------------------------------------------------------------

def _section_errors(messages: list) -> list:
    from slack_server import block_errors
    return [e for m in messages for e in block_errors(list(m.blocks))]


def _change(day: str, pub: str) -> Any:
    from atlasmart_assets.alerts import format as fmt
    return fmt.PartitionChange(day, pub, "publish", 8, 8, [8, 5, 10, 690, 435, 255], [8, 5, 10, 690, 425, 265],
                               "a" * 64, "b" * 64, True)


def test_a_failed_per_partition_backfill_that_published_most_days_stays_within_slacks_limits() -> None:
    """ATLASMART_BACKFILL_POLICY=per_partition (a supported policy) makes each day its own run and publication. A
    120-day backfill whose one day was refused is "published, then failed": its head names every publication in one
    section, past Slack's 3,000 characters, so Slack refuses the blocks and only the cut text arrives."""
    import datetime as dt

    from atlasmart_assets.alerts import format as fmt
    days = [(dt.date(2026, 5, 1) + dt.timedelta(days=k)).isoformat() for k in range(120)]
    published = [_change(d, f"pub-2026120{k % 10}T1344{k:02d}-{k:08x}") for k, d in enumerate(days[:-1])]
    b = fmt.Backfill("abcdefgh", fmt.window_label(days), ["mart/revenue_daily"], "late files", "ana", {})
    messages = fmt.backfill_failed(b, "COMPLETED_FAILED", fmt.Links("http://localhost:3000"), published)
    assert _section_errors(messages) == [], [len(bl["text"]["text"]) for m in messages for bl in m.blocks
                                             if bl.get("text")]


def test_a_rollback_that_undoes_many_single_day_backfills_stays_within_slacks_limits() -> None:
    """Stale days are corrected "by backfilling that day alone" (README): a quarter later a rollback of the range to a
    chosen publication undoes each of those backfills. Its head links every one in one section, past 3,000
    characters: Slack refuses the blocks and the text-only fallback is cut at 2,000 characters."""
    import datetime as dt

    from atlasmart_assets.alerts import format as fmt
    days = [(dt.date(2026, 5, 1) + dt.timedelta(days=k)).isoformat() for k in range(90)]
    undone = [f"{k:08x}" for k in range(90)]  # Dagster's backfill ids are 8 characters
    changes = [_change(d, "rol-20261207T134443-bb5959d5") for d in days]
    messages = fmt.rolled_back("f" * 36, "undo the quarter", changes, undone, "mart/revenue_daily",
                               fmt.Links("http://localhost:3000"))
    assert _section_errors(messages) == [], [len(bl["text"]["text"]) for m in messages for bl in m.blocks
                                             if bl.get("text")]


# --- the command line --------------------------------------------------------------------------------------------

def test_plan_over_a_day_with_no_raw_file_says_so_in_one_line_and_exits_2(env, capsys) -> None:
    """`atlasmart plan` over a window whose raw evidence is missing or malformed (here: a day with no file yet)
    raised RawInputError out of main(): a Python traceback and exit 1, where every other refusal of the commands is
    one line naming the problem and exit 2."""
    from atlasmart_assets import cli
    (env.raw_dir / "partition=2026-09-20.json").unlink()
    code = cli.main(["plan", "--from", "2026-09-19", "--to", "2026-09-20"])
    err = capsys.readouterr().err
    assert code == 2 and "partition=2026-09-20.json" in err and "Traceback" not in err, (code, err)



# --- rollback ----------------------------------------------------------------------------------------------------

def _current(env, day: str) -> str:
    import duckdb
    con = duckdb.connect(str(env.warehouse_path), read_only=True)
    try:
        return con.execute("select publication_id from audit.current_publications where partition_date = $d",
                           {"d": day}).fetchone()[0]
    finally:
        con.close()


def test_a_rollback_to_the_publication_already_current_says_so_not_past_retention(env, instance, published,
                                                                                  capsys) -> None:
    """`--to-publication` naming what is current (an id copied from the wrong line of a notice): refused, rightly,
    but as "the earlier versions of 2026-09-20 (1 day) are past retention" with three versions of a retention of
    ten. The operator is told the history is gone when it is not."""
    from atlasmart_assets import cli, lab
    published(("2026-09-18", "2026-09-20"))  # the command's rollback runs in DAGSTER_HOME's instance, not this one
    lab.publish_legacy_incident(Warehouse())
    assert run_chain(instance, "2026-09-20", "2026-09-20", {"dagster/backfill": "bf-fix"}).success
    current = _current(env, "2026-09-20")
    capsys.readouterr()
    code = cli.main(["rollback", "--from", "2026-09-20", "--reason", "undo", "--to-publication", current])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and _current(env, "2026-09-20") == current
    assert "past retention" not in last and "already show it" in last, last


def test_a_refused_rollback_s_run_failure_alert_names_the_days_it_was_asked_to_roll_back(env, instance,
                                                                                         published) -> None:
    """A rollback refused by the fence (or with nothing earlier to restore) is a failed run of rollback_job: the run
    failure alert is all Slack gets of it. Its window is in the run's config, not its tags, so the alert says
    "Failing partition(s): none", "Run window: none" and "(no assets)": the channel cannot tell which days."""
    from atlasmart_assets.definitions import defs
    # The sensor alerts on failed runs only: the publication's successful run need not be in this instance.
    published(("2026-09-19", "2026-09-21", {"atlasmart/fence_override": "test"}))
    result = defs.resolve_job_def("rollback_job").execute_in_process(
        instance=instance, raise_on_error=False,
        run_config={"ops": {"rollback_range": {"config": {"start": "2026-09-20", "end": "2026-09-21",
                                                          "reason": "undo"}}}})
    assert not result.success
    with SlackServer() as server:
        _tick("atlasmart_run_failures_to_slack", instance, _slack(server))
    [alert] = [rendered(m) for m in server.messages]
    assert "2026-09-20" in alert.split("*Step*")[0], alert


@pytest.mark.parametrize("tags", [{"user": "ana", "dagster/user": "bo"}, {"requested_by": "ana"}],
                         ids=["user-and-dagster-user", "requested_by"])
def test_slack_and_the_notice_name_the_same_requester(env, instance, tags) -> None:
    """Who asked is read with two different lists of tags: Slack's (alerts/lifecycle.USER_TAGS: user, dagster/user,
    atlasmart/requested_by, requested_by) and the ledger's and notice's (contract.USER_TAGS: dagster/user, user,
    atlasmart/requested_by). A run with both user tags is "ana" in Slack and "bo" in the notice; one tagged
    `requested_by=ana` is "ana" in Slack and "no user tag" in the notice (which lists requested_by=ana as a tag)."""
    bf = "bf-who"
    assert run_chain(instance, "2026-09-20", "2026-09-20", {"dagster/backfill": bf, "atlasmart/reason": "r",
                                                            **tags}).success
    with SlackServer() as server:
        _tick(LIFECYCLE, instance, _slack(server))
    started = next(rendered(m) for m in server.messages if "Correction in progress" in m["text"])
    # Without a user Slack adds the reason ("no user tag — reason: …"): who asked is before it.
    slack_who = started.split("*Requested by*\n")[1].splitlines()[0].split(" — reason: ")[0]
    notice = (env.notices_dir / f"{bf}.md").read_text()
    notice_who = notice.split("- Requested by: ")[1].splitlines()[0]
    assert slack_who == notice_who, (slack_who, notice_who)


def test_a_refused_to_publication_is_quoted_so_a_newline_in_it_does_not_cut_the_command_s_message(
        env, published, capsys) -> None:
    """README: "A config value a plan or rollback refuses (…) is quoted cut to 64 characters". The rollback's
    `to_publication` is cut (contract.shown_id) but not quoted, and the command prints only the last line of the
    error: a value with a newline (or a terminal escape) loses the start of the message and reaches the terminal raw."""
    from atlasmart_assets import cli
    published(("2026-09-19", "2026-09-20"))  # the command's rollback runs in DAGSTER_HOME's instance, not this one
    capsys.readouterr()
    code = cli.main(["rollback", "--from", "2026-09-19", "--reason", "r", "--to-publication",
                     "pub-typo\n\x1b[31mrest"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert "publication" in last and "pub-typo" in last and "\x1b" not in last, repr(last)


def test_the_plan_shows_an_unpublished_day_as_such_and_says_when_it_writes_no_chart(env, capsys, tmp_path) -> None:
    """A day the backfill publishes first read "None → 12" in the plan's table; `--png` over a window with no day
    in scope (the newest partition, fenced) wrote nothing and said nothing."""
    from atlasmart_assets import cli
    capsys.readouterr()
    assert cli.main(["plan", "--from", "2026-09-18", "--to", "2026-09-18"]) == 0
    out = capsys.readouterr().out
    [row] = [line for line in out.splitlines() if line.startswith("| 2026-09-18 |")]
    assert "None" not in row and "unpublished →" in row, row
    chart = tmp_path / "plan.png"
    assert cli.main(["plan", "--from", "2026-09-21", "--png", str(chart)]) == 0
    assert not chart.exists() and "no chart written" in capsys.readouterr().err


def test_a_refused_window_of_one_day_names_no_end() -> None:
    """`--from garbage` without `--to` was refused as "window 'garbage'..None" (a review)."""
    from atlasmart_assets.window import Window
    with pytest.raises(ValueError) as refused:
        Window.of("2026-13-01")
    assert str(refused.value) == "window '2026-13-01': partitions are YYYY-MM-DD dates"
    with pytest.raises(ValueError, match=r"window '2026-09-01'..'x': partitions"):
        Window.of("2026-09-01", "x")
