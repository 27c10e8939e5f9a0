"""Clear the correction-in-progress flags of runs that ended without publishing (crash, cancel, refusal).

A plain sensor over the flags table rather than a run_status_sensor: that one moves its cursor past a run even
when its body raised, so a flag whose clearing failed once would stay forever. Here every tick looks at what is
flagged now, so a failed clearing is simply retried."""

from __future__ import annotations

import dagster as dg

from atlasmart_assets.resources import WAREHOUSE_KEY, Warehouse
from atlasmart_assets.warehouse import flags

TICK_LOCK_TIMEOUT_S = 20.0


def stale_holders(instance: dg.DagsterInstance, held: dict[str, list[str]]) -> list[str]:
    out = []
    for run_id in held:
        run = instance.get_run_by_id(run_id)
        if run is None or run.is_finished:
            out.append(run_id)
    return sorted(out)


def build(interval_s: int = 30) -> dg.SensorDefinition:
    @dg.sensor(
        name="atlasmart_clear_correction_flags",
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        required_resource_keys={WAREHOUSE_KEY},
        description="A run that ended without publishing no longer holds its window: readers stop seeing "
                    "'correction in progress'.",
    )
    def clear_flags(context: dg.SensorEvaluationContext) -> dg.SkipReason:
        wh: Warehouse = getattr(context.resources, WAREHOUSE_KEY)
        if not wh.settings.warehouse_path.exists():
            return dg.SkipReason("no warehouse yet")
        with wh.reader(timeout_s=TICK_LOCK_TIMEOUT_S) as con:
            held = flags.held_by(con)
        stale = stale_holders(context.instance, held)
        if not stale:
            return dg.SkipReason(f"{len(held)} run(s) hold correction flags; none has ended")
        with wh.writer(timeout_s=TICK_LOCK_TIMEOUT_S) as con:
            cleared = {run_id: flags.clear(con, run_id) for run_id in stale}
        return dg.SkipReason(f"cleared the flags of ended runs: {cleared}")

    return clear_flags
