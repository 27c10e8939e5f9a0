"""Two re-executions of one failed rollback (siblings, as two tabs or the retry daemon and an operator make them):
one rollback, announced once (a review's cases, 2026-12-07). The re-executions carry the root and parent tags the UI
gives them; Dagster's API alone gives none, and its siblings are then invisible to each other."""

import dagster as dg

from atlasmart_assets import rollback as rollback_mod
from atlasmart_assets.assets import day_metadata
from atlasmart_assets.definitions import defs
from atlasmart_assets.resources import Warehouse
from atlasmart_tests import retries
from atlasmart_tests.test_rollback import _current, _rollback_job, _rollbacks, _three_versions

DAY = "2026-09-20"


def ui_tags(parent: str, root: str | None = None) -> dict[str, str]:
    """The tags the UI gives a re-execution of `parent` (of root `root`: by default `parent` is a first run)."""
    return {"dagster/root_run_id": root or parent, "dagster/parent_run_id": parent}


CONFIG = {"ops": {"rollback_range": {"config": {"start": DAY, "reason": "undo v3"}}}}


def _told(inst):
    from atlasmart_assets.alerts import lifecycle
    from atlasmart_assets.alerts.slack import AtlasSlack

    slack = AtlasSlack(token="xoxb-test", ui_base_url="http://ui.test")
    context = dg.build_sensor_context(instance=inst, definitions=defs,
                                      resources={"slack": slack, "warehouse": Warehouse()})
    done = {"backfills": {f"bf-v{k}": {"ts": None, "done": True} for k in range(3)}}
    return {n.key: " ".join(m.text for m in n.messages) for n in lifecycle._notices(context, slack, done)}


def test_two_re_executions_of_one_failed_rollback_announce_its_rollback_once(env, monkeypatch) -> None:
    """A1 commits v3 -> v2, fails writing events. The operator re-executes A1 (A2, succeeds) and, say from another
    tab, re-executes A1 again (A2'). Only one rollback was made: Slack announces it once."""
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, DAY)
        v2 = _current(env, DAY)[1]
        retries.fail_once(monkeypatch, day_metadata, "fact")
        a1 = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=CONFIG, raise_on_error=False)
        assert not a1.success and _current(env, DAY)[2] == v2
        a2 = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                            reexecution_options=dg.ReexecutionOptions.from_failure(a1.run_id, inst),
                            tags=ui_tags(a1.run_id))
        a2b = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                             reexecution_options=dg.ReexecutionOptions.from_failure(a1.run_id, inst),
                            tags=ui_tags(a1.run_id))
        told = _told(inst)
        assert a2.success and a2b.success and _rollbacks(env) == 1
        assert len(told) == 1, f"one rollback announced {len(told)} times: {sorted(told)}"


def test_a_sibling_re_execution_after_a_retry_that_committed_does_not_step_back_again(env, monkeypatch) -> None:
    """A1 fails before its commit; A2 (re-executes A1) commits v3 -> v2 and fails writing its events; the operator
    re-executes A1 again (A2'), the run the UI shows failed first: A2' finds its sibling's commit and restores
    nothing more (a review found it restoring v1: only parents were attempts)."""
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, DAY)
        v2 = _current(env, DAY)[1]
        retries.fail_once(monkeypatch, rollback_mod, "rollback")  # A1: fails before anything is committed
        a1 = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=CONFIG, raise_on_error=False)
        assert not a1.success and _rollbacks(env) == 0
        retries.fail_once(monkeypatch, day_metadata, "fact")  # A2: commits, then fails writing its events
        a2 = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                            reexecution_options=dg.ReexecutionOptions.from_failure(a1.run_id, inst),
                            tags=ui_tags(a1.run_id))
        assert not a2.success and _current(env, DAY)[2] == v2 and _rollbacks(env) == 1
        a2b = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                             reexecution_options=dg.ReexecutionOptions.from_failure(a1.run_id, inst),
                            tags=ui_tags(a1.run_id))
        assert a2b.success
        assert (_rollbacks(env), _current(env, DAY)[2]) == (1, v2), "the run group stepped back twice (v3->v2->v1)"


def _reexec(inst, parent: str, root: str, from_failure: bool = True):  # noqa: ANN001, ANN202
    opts = (dg.ReexecutionOptions.from_failure(parent, inst) if from_failure
            else dg.ReexecutionOptions(parent_run_id=parent))
    return dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                          reexecution_options=opts, tags=ui_tags(parent, root))


def test_a_second_re_execution_of_a_failed_rollback_after_one_that_succeeded_steps_back_once(
        env, monkeypatch) -> None:
    """A1 fails before its commit. A2 (re-executes A1) commits v3 -> v2 and succeeds. A2' re-executes A1 again
    (say the retry daemon made A2 and the operator, seeing A1 failed, clicked Re-execute): two re-executions of one
    failed rollback make one rollback, a sibling that succeeded being an attempt too (a review found v1 restored)."""
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, DAY)
        v2 = _current(env, DAY)[1]
        retries.fail_once(monkeypatch, rollback_mod, "rollback")
        a1 = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=CONFIG, raise_on_error=False)
        assert not a1.success and _rollbacks(env) == 0
        a2 = _reexec(inst, a1.run_id, a1.run_id)
        assert a2.success and _rollbacks(env) == 1 and _current(env, DAY)[2] == v2
        a2b = _reexec(inst, a1.run_id, a1.run_id)
        assert a2b.success
        assert (_rollbacks(env), _current(env, DAY)[2]) == (1, v2), \
            f"stepped back twice: {_rollbacks(env)} rollbacks, current restores {_current(env, DAY)[2]}"


def test_a_re_execution_of_a_successful_rollback_is_another_rollback_whatever_its_siblings_committed(
        env, monkeypatch) -> None:
    """R succeeds (v3 -> v2). Y re-executes R (another rollback): commits v2 -> v1, fails writing events. Z re-executes
    R again: re-executing a successful rollback is another rollback, here refused (v1 is the first publication), and
    Y, a sibling outside Z's lineage, no attempt of Z's (a review found Z taking Y's commit as its own)."""
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, DAY)
        r = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=CONFIG, raise_on_error=False)
        assert r.success and _rollbacks(env) == 1
        retries.fail_once(monkeypatch, day_metadata, "fact")
        y = _reexec(inst, r.run_id, r.run_id, from_failure=False)
        assert not y.success and _rollbacks(env) == 2
        z = _reexec(inst, r.run_id, r.run_id, from_failure=False)
        assert not z.success and _rollbacks(env) == 2, "Z took Y's commit for its own"


def test_a_retried_rollback_writes_the_notice_its_attempt_did_not_naming_who_asked(env, monkeypatch) -> None:
    """A rollback launched by ana (ticket OPS-9) commits, then fails writing its notice. Its re-execution writes
    the notice, naming who asked and the tags, and the lifecycle sensor's Slack reply and the notice agree. A review
    found the notice written later by the sensor saying "Requested by: no user tag" with no tags."""
    from atlasmart_assets import notices
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, DAY)
        retries.fail_once(monkeypatch, notices, "write")
        first = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=CONFIG, raise_on_error=False,
                               tags={"user": "ana", "ticket": "OPS-9"})
        assert not first.success and not list(env.notices_dir.glob("rol-*.md"))
        # The UI re-executes a run with its tags.
        retry = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                               tags={"user": "ana", "ticket": "OPS-9", **ui_tags(first.run_id)},
                               reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, inst))
        assert retry.success
        [path] = env.notices_dir.glob("rol-*.md")
        head = path.read_text().split("## ")[0]
        assert "- Requested by: ana" in head and "- Tags: ticket=OPS-9\n" in head, head
        assert "Requested by: ana" in " ".join(_told(inst).values())


def test_a_retried_rollback_that_finds_its_earlier_commit_ends_its_log_done(env, monkeypatch) -> None:
    """The retry writes the events of the commit it found: its last progress line says `done`, not time to go (a
    review found "about 0 s to go", over a year "about 1 s")."""
    with dg.instance_for_test() as inst:
        _three_versions(env, inst, DAY)
        retries.fail_once(monkeypatch, day_metadata, "fact")
        first = dg.execute_job(dg.reconstructable(_rollback_job), inst, run_config=CONFIG, raise_on_error=False)
        assert not first.success
        retry = dg.execute_job(dg.reconstructable(_rollback_job), inst, raise_on_error=False,
                               reexecution_options=dg.ReexecutionOptions.from_failure(first.run_id, inst),
                               tags=ui_tags(first.run_id))
        assert retry.success
        lines = [e.user_message for e in inst.all_logs(retry.run_id)
                 if not e.dagster_event and e.user_message.startswith("rollback") and " so far, " in e.user_message]
        assert lines and "[4/4] events" in lines[-1] and lines[-1].endswith(", done"), lines
