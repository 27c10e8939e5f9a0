"""Clear the correction-in-progress flag of a backfill run that ended without publishing (crash, cancel, refusal)."""

import dagster as dg

from atlasmart_assets import settings, warehouse
from atlasmart_assets.window import BACKFILL_TAG


def build() -> dg.SensorDefinition:
    @dg.run_status_sensor(
        run_status=dg.DagsterRunStatus.FAILURE,
        name="atlasmart_clear_correction_flags_on_failure",
        default_status=dg.DefaultSensorStatus.RUNNING,
        monitor_all_code_locations=False,
        description="A failed backfill run no longer holds its window: readers stop seeing 'correction in progress'.",
    )
    def clear_on_failure(context: dg.RunStatusSensorContext) -> None:
        if BACKFILL_TAG in context.dagster_run.tags:
            warehouse.clear_in_progress(settings.load(), context.dagster_run.run_id)

    return clear_on_failure
