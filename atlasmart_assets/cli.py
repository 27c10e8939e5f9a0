"""`atlasmart`: the operator's command line (lab, plan, rollback, generate)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import uuid
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dagster import DagsterInstance

# A shell's exit status for a command ended by Ctrl-C (128 + SIGINT).
INTERRUPTED = 130
# How long a stopped rollback waits to read the ledger: a warehouse another process holds delays its last line by
# seconds, not by the lock timeout (600 s by default).
LEDGER_READ_TIMEOUT_S = 5.0


class CommandFailed(RuntimeError):
    """A command's failure with its own exit status (an interrupted rollback exits 130, not 2)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _lab(args: argparse.Namespace) -> int:
    os.environ["ATLASMART_DATA_DIR"] = args.data_dir or tempfile.mkdtemp(prefix="atlasmart-lab-")
    os.environ["ATLASMART_AS_OF"] = "2026-09-22"
    from atlasmart_assets import lab

    summary = lab.run()
    print(json.dumps({"data_dir": os.environ["ATLASMART_DATA_DIR"], **summary}, indent=2))
    ok = (summary["historical_controls"] == summary["expected_historical_controls"]
          and summary["current_controls"] == summary["expected_current_controls"]
          and summary["current_hash_unchanged_after_backfill"])
    return 0 if ok else 1


def _instance() -> DagsterInstance:
    """The instance at DAGSTER_HOME (what `make dev` and the deployment use), so a rollback from the command line
    is a run like one launched in the UI; without DAGSTER_HOME, an ephemeral instance (and a warning)."""
    import dagster as dg

    if os.environ.get("DAGSTER_HOME"):
        # A fresh checkout has no instance directory yet (`make dev` creates it): create it rather than fail.
        os.makedirs(os.environ["DAGSTER_HOME"], exist_ok=True)
        return dg.DagsterInstance.get()
    print("atlasmart rollback: DAGSTER_HOME is not set: the rollback run is recorded in a temporary instance, not "
          "in the one the UI shows (set DAGSTER_HOME, e.g. var/dagster_home as `make dev` does)", file=sys.stderr)
    return dg.DagsterInstance.ephemeral()


def _migrate(args: argparse.Namespace) -> int:
    """Apply pending schema migrations now, at a time of the operator's choosing, instead of in the first run's
    writer (an upgrade that moves a year of rows holds the warehouse while it does)."""
    from atlasmart_assets.resources import Warehouse
    from atlasmart_assets.warehouse import migrations

    wh = Warehouse()
    before: set[int] = set()
    if wh.settings.warehouse_path.exists():
        with wh.reader() as con:
            before = migrations.applied(con)
    with wh.writer() as con:  # it applies every pending migration on opening
        after = migrations.applied(con)
    ran = sorted(after - before)
    print(f"warehouse {wh.settings.warehouse_path}: applied {', '.join(map(str, ran)) or 'nothing'}; "
          f"schema at migration {max(after)}")
    return 0


def _quiet_dagster_notes() -> None:
    """Dagster's notes on its beta and preview APIs, raised as the definitions load, are for this code's authors,
    not for an operator at a terminal."""
    import dagster as dg

    warnings.filterwarnings("ignore", category=dg.BetaWarning)
    warnings.filterwarnings("ignore", category=dg.PreviewWarning)


def _rollback(args: argparse.Namespace) -> int:
    """Run `rollback_job`, the job the UI launches, in this process against the instance: the run, its
    materializations, the change notice and the Slack message follow as for a rollback launched in the UI."""
    try:  # loading the definitions takes seconds: a Ctrl-C then stops the command before any run
        import dagster as dg

        _quiet_dagster_notes()
        from atlasmart_assets.definitions import defs
        from atlasmart_assets.contract import FENCE_OVERRIDE_TAG, LAUNCHED_FROM_TAG, REQUESTED_BY_TAG
        from atlasmart_assets.window import Window
    except KeyboardInterrupt:
        raise CommandFailed("interrupted before its run started: nothing was published", INTERRUPTED) from None

    Window.of(args.start, args.end)  # a malformed or reversed range is the operator's input error, not a failed run
    config = {"start": args.start, "end": args.end, "reason": args.reason, "to_publication": args.to_publication}
    run_id = str(uuid.uuid4())  # known before the run starts: a Ctrl-C before Dagster returns one is reported
    with _instance() as instance:
        # Dagster's console log (its engine events, a refusal's stack trace) stays in the run, shown in the UI; the
        # terminal gets the rollback's own lines as they are written (the op tees them, jobs._log_for), then the
        # outcome.
        ui = not instance.is_ephemeral
        try:
            result = defs.resolve_job_def("rollback_job").execute_in_process(
                instance=instance, raise_on_error=False, run_id=run_id,
                tags={LAUNCHED_FROM_TAG: "cli", **({REQUESTED_BY_TAG: args.requested_by} if args.requested_by else {}),
                      **({FENCE_OVERRIDE_TAG: args.fence_override} if args.fence_override else {})},
                run_config={"ops": {"rollback_range": {"config": {k: v for k, v in config.items() if v is not None}}},
                            "loggers": {"console": {"config": {"log_level": "CRITICAL"}}}})
        except KeyboardInterrupt:  # Ctrl-C outside the step (Dagster turns one inside it into a failed step)
            raise _stopped(run_id, ui) from None
        if not result.success:
            failures = [e.event_specific_data.error for e in result.all_events
                        if e.event_type == dg.DagsterEventType.STEP_FAILURE and e.event_specific_data]
            if any(_interrupted(err) for err in failures):
                raise _stopped(run_id, ui)
            if not ui:  # the run's log goes with its temporary instance: the whole error is shown here
                for err in failures:
                    print(err.to_string(), file=sys.stderr)
            message = "; ".join(_user_message(err) for err in failures) or "the rollback run failed"
            raise RuntimeError(f"{message} (run {run_id}; {_outcome(run_id, ui)})")
        summary = result.output_for_node("rollback_range")
    print(json.dumps({"run_id": result.run_id, **summary}, indent=2))
    return 0


def _stopped(run_id: str, ui: bool) -> CommandFailed:
    """A rollback run stopped by a signal: exit 130, with what the ledger holds for it."""
    return CommandFailed(f"interrupted (run {run_id}; {_outcome(run_id, ui)})", INTERRUPTED)


def _interrupted(error: Any) -> bool:
    """Whether a step failed because the process was interrupted (Ctrl-C, SIGTERM), on any level of its causes."""
    from atlasmart_assets.progress import INTERRUPTIONS

    while error is not None:
        if error.cls_name in INTERRUPTIONS:
            return True
        error = getattr(error, "cause", None)
    return False


def _outcome(run_id: str, ui: bool) -> str:
    """What a rollback run that did not succeed left published, from the ledger: a run can stop after its commit,
    and then the rollback stands. Extracts its commit did not swap in yet are swapped in here, as the next writer
    or the code location's load would (recover_extracts). `ui`: the run is in an instance the UI shows."""
    from atlasmart_assets import extracts, notices
    from atlasmart_assets.resources import Warehouse
    from atlasmart_assets.warehouse.connection import is_lock_conflict
    from atlasmart_assets.warehouse.publish import recover_extracts

    wh = Warehouse()
    unread = "look for this run id in audit.publications before rolling back again"
    swapped: str | None = None
    try:
        with wh.reader(timeout_s=LEDGER_READ_TIMEOUT_S) as con:
            committed = [r[0] for r in con.execute(
                "select distinct publication_id from audit.publications where run_id = $r order by 1",
                {"r": run_id}).fetchall()]
            if committed:
                try:
                    recover_extracts(wh, con)
                except (Exception, KeyboardInterrupt) as exc:  # noqa: BLE001 - the commit was read: say it
                    swapped = type(exc).__name__
    except KeyboardInterrupt:
        return f"whether it committed was not read (interrupted again): {unread}"
    except Exception as exc:  # noqa: BLE001 - the command must still report; say what could not be read
        why = "another process holds the warehouse" if is_lock_conflict(exc) else type(exc).__name__
        return f"whether it committed could not be read ({why}): {unread}"
    if not committed:
        return "nothing was published"
    shown = extracts.current_version(wh.settings) in committed
    text = (f"publication {', '.join(committed)} was committed before it stopped: the ledger and the tables show the "
            "rollback, and " + ("so do the extracts" if shown else
                                "the extracts do not yet (the next publish, or the code location's load, swaps "
                                "them in" + (f"; swapping them here failed: {swapped})" if swapped else ")")))
    if not all(notices.notice_path(wh.settings, pub).exists() for pub in committed):
        text += "; its change notice was not written (it stopped before that)"
    if ui:
        text += "; the UI's partitions may not show it until their next materialization"
    return text


def _refused(exc: Exception) -> bool:
    """A refusal the command reports in a line (exit 2): bad arguments, or evidence that names its file and problem."""
    from atlasmart_assets.deletions import RequestError
    from atlasmart_assets.dimension import DimensionError
    from atlasmart_assets.raw_files import RawInputError

    return isinstance(exc, (ValueError, RuntimeError, RawInputError, DimensionError, RequestError))


def _user_message(error: Any) -> str:
    """The innermost cause of a step failure: the operator's error, not Dagster's wrapper."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    return error.message.strip().splitlines()[-1] if error.message.strip() else error.cls_name


def _plan(args: argparse.Namespace) -> int:
    _quiet_dagster_notes()
    from atlasmart_assets import plan
    from atlasmart_assets.assets.graph import asset_graph
    from atlasmart_assets.resources import Warehouse

    p = plan.make(Warehouse(), asset_graph(), args.start, args.end, args.assets or None,
                  fence_override=args.fence_override)
    if args.json:
        print(json.dumps(p.as_dict(), indent=2))
    else:
        print(plan.markdown(p))
    if args.png and p.impact:
        with open(args.png, "wb") as fh:
            fh.write(plan.png(p))
    elif args.png:
        print(f"atlasmart plan: no chart written to {args.png}: no day of the window is in scope", file=sys.stderr)
    return 0


def _stale(args: argparse.Namespace) -> int:
    from atlasmart_assets import stale
    from atlasmart_assets.resources import Warehouse
    from atlasmart_assets.window import Window

    wh = Warehouse()
    # --to alone: from the first partition (until 2026-12-07 it was dropped and every stale day listed).
    window = Window.of(args.start or wh.settings.start_date.isoformat(), args.end) if args.start or args.end else None
    try:
        days, unreadable = stale.stale_days(wh, window), None
    except stale.ReferenceUnreadable as exc:  # what the landing batches tell is shown, then the command fails
        days, unreadable = exc.days, exc
    if args.json:
        print(json.dumps([d.as_dict() for d in days], indent=2))
    else:
        for d in days:
            print(f"{d.partition}: {'; '.join(d.reasons)} (published as {d.publication_id})")
        if not days and unreadable is None:
            print("no published day is stale")
    if unreadable is not None:
        raise unreadable
    return 0


def _generate(args: argparse.Namespace) -> int:
    from atlasmart_assets import generate

    generate.main(args.rest)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="atlasmart", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    lab = sub.add_parser("lab", help="replay the seed lab on a scratch data dir and print the acceptance summary")
    lab.add_argument("--data-dir", help="where to write (default: a new temporary directory)")
    lab.set_defaults(func=_lab)
    mg = sub.add_parser("migrate", help="apply pending schema migrations now (otherwise the first run's writer does)")
    mg.set_defaults(func=_migrate)
    rb = sub.add_parser("rollback", help="restore the previous publication of a range, in one commit")
    rb.add_argument("--from", dest="start", required=True)
    rb.add_argument("--to", dest="end")
    rb.add_argument("--reason", required=True)
    rb.add_argument("--to-publication", help="restore this publication id (default: one version back per partition)")
    rb.add_argument("--fence-override", help="the reason to roll back the newest partition together with earlier "
                                             "days (the current lane owns it; recorded in the ledger)")
    rb.add_argument("--requested-by", help="who asks (the run's atlasmart/requested_by tag: the notice and the Slack "
                                           "message name them)")
    rb.set_defaults(func=_rollback)
    pl = sub.add_parser("plan", help="preview a backfill: scope, fence, reach, neighbours, data impact (writes nothing)")
    pl.add_argument("--from", dest="start", required=True)
    pl.add_argument("--to", dest="end")
    pl.add_argument("--asset", dest="assets", action="append", help="asset key, e.g. fact/fct_order_lines")
    pl.add_argument("--fence-override", help="the reason you would give to include the newest partition")
    pl.add_argument("--json", action="store_true")
    pl.add_argument("--png", help="write the before/after chart here")
    pl.set_defaults(func=_plan)
    st = sub.add_parser("stale", help="published days whose evidence changed since their publication (writes nothing)")
    st.add_argument("--from", dest="start", help="first day (YYYY-MM-DD); default: the first partition")
    st.add_argument("--to", dest="end", help="last day; default: --from alone, or every day when neither is given")
    st.add_argument("--json", action="store_true", help="a JSON list, one object per stale day: partition, reasons, ...")
    st.set_defaults(func=_stale)
    gen = sub.add_parser("generate", help="write deterministic raw evidence (see --help of atlasmart_assets.generate)")
    gen.add_argument("rest", nargs=argparse.REMAINDER)
    gen.set_defaults(func=_generate)
    args = parser.parse_args(argv)
    # SIGTERM stops a command as Ctrl-C does, before a run starts too (Dagster handles both during a run).
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None
    try:
        return args.func(args)
    except CommandFailed as exc:
        print(f"atlasmart {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except Exception as exc:
        if not _refused(exc):
            raise
        print(f"atlasmart {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"atlasmart {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
    finally:
        if previous is not None:  # None: no handler installed, or one not from Python, which cannot be put back
            signal.signal(signal.SIGTERM, previous)


def _terminated(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    sys.exit(main())
