"""raw.order_lines: the day's evidence verified (sha256, manifest, shape) and loaded as received."""


import json
from typing import Iterator

import dagster as dg

from atlasmart_assets import raw_files, warehouse
from atlasmart_assets.assets.common import BACKFILL_POLICY, CODE_VERSION, begin, check_result, refuse
from atlasmart_assets.audits import Audit
from atlasmart_assets.partitions import daily_partitions
from atlasmart_assets.raw_files import Finding

KEY = ("raw", "order_lines")
CHECKS = (
    "raw_order_lines_required_fields_present",
    "raw_order_lines_match_manifest",
    "raw_order_lines_sha256_unchanged",
)

customers = dg.AssetSpec(
    key=["raw", "customers"], group_name="raw",
    description="SCD2 customer dimension (raw/customers.json): one row per customer version, valid_from/valid_to.",
)


def _immutability(files: list[raw_files.RawFile], first_seen: dict[str, dict]) -> list[Finding]:
    return [
        Finding(CHECKS[2], f.partition, f.path,
                f"sha256 {f.sha256[:12]}… differs from {first_seen[f.partition]['sha256'][:12]}… first loaded by run "
                f"{first_seen[f.partition]['first_run_id']}: raw is never rewritten in place; deliver a new "
                "extraction as a new batch")
        for f in files if f.partition in first_seen and first_seen[f.partition]["sha256"] != f.sha256
    ]


@dg.asset(
    key=list(KEY), group_name="raw", partitions_def=daily_partitions, backfill_policy=BACKFILL_POLICY,
    code_version=CODE_VERSION,
    check_specs=[dg.AssetCheckSpec(name, asset=list(KEY), blocking=True) for name in CHECKS],
    description="Order lines as received, one row per record; raw files are verified and never modified.",
)
def raw_order_lines(context: dg.AssetExecutionContext) -> Iterator[dg.AssetCheckResult | dg.MaterializeResult]:
    step = begin(context)
    con = warehouse.open_scratch(step.cfg, step.run.run_id)
    try:
        try:
            files = raw_files.load_window(con, step.cfg.raw_dir, step.window)
        except raw_files.RawInputError as exc:
            refuse(step, [Audit("raw_order_lines_required_fields_present", KEY, False, description=str(exc))])
            raise
        figures, findings = raw_files.profile(con, files)
    finally:
        con.close()
    first_seen = warehouse.raw_manifests(step.cfg, step.window)
    findings += _immutability(files, first_seen)
    audits = []
    for name in CHECKS:
        mine = [f for f in findings if f.check == name]
        text = "; ".join(f"raw partition {f.partition} ({f.path}): {f.problem}" for f in mine)
        audits.append(Audit(name, KEY, not mine, description=text or f"{len(files)} files pass",
                            figures={f.partition: f.problem for f in mine}))
    yield from (check_result(a) for a in audits)
    refuse(step, audits)
    # Raw is immutable: a partition whose identical file is already fully loaded needs no second copy.
    to_load = [f.partition for f in files
               if f.partition not in first_seen or first_seen[f.partition]["loaded_rows"] != f.manifest["records"]]
    warehouse.load_raw(step.cfg, warehouse.scratch_path(step.cfg, step.run.run_id), to_load, [
        {"partition_date": f.partition, "file": str(f.path), "sha256": f.sha256, "source": f.manifest["source"],
         "schema_version": f.manifest["schema_version"], "extraction_batch": f.manifest["extraction_batch"],
         "extracted_at": f.manifest.get("extracted_at"), "source_high_sequence": f.manifest["source_high_sequence"],
         "records": f.manifest["records"], "controls": json.dumps(f.controls), "run_id": step.run.run_id}
        for f in files])
    yield dg.MaterializeResult(metadata={
        "window": str(step.window),
        "records": sum(fig["records"] for fig in figures.values()),
        "partitions_loaded": len(to_load),
        "partitions_already_loaded": len(files) - len(to_load),
        "per_partition": dg.MetadataValue.json({
            f.partition: {"records": figures[f.partition]["records"], "controls": figures[f.partition]["controls"],
                          "sha256": f.sha256, "source_high_sequence": f.manifest["source_high_sequence"]}
            for f in files}),
        "code_version": CODE_VERSION,
        **warehouse.LOCK_STATS.figures(),
    })
