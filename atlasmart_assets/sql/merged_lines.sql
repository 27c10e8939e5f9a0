-- The day's evidence: its landing batches merged. Per line_id the record with the highest source_sequence wins;
-- a winning `delete` retracts the line; a snapshot batch retracts every line it does not contain whose latest
-- record is older than the snapshot's source_high_sequence.
-- Most line_ids have one record and most days one batch: only line_ids with several records are ranked, and only
-- days with several batches can retract by snapshot (a day's only batch holds every line of the day).
with lines as (
    select * from candidate.raw_lines
),

batches as (
    select * from candidate.raw_batches
),

repeated as (
    select
        partition_date,
        line_id
    from lines
    group by partition_date, line_id
    having count(*) > 1
),

latest_of_repeated as (
    select lines.*
    from lines
    semi join repeated
        on
            lines.partition_date = repeated.partition_date
            and lines.line_id is not distinct from repeated.line_id
    qualify row_number() over (partition by lines.partition_date, lines.line_id order by lines.source_sequence desc) = 1
),

latest as (
    select lines.*
    from lines
    anti join repeated
        on
            lines.partition_date = repeated.partition_date
            and lines.line_id is not distinct from repeated.line_id
    union all
    select * from latest_of_repeated
),

several_batches as (
    select partition_date
    from batches
    group by partition_date
    having count(*) > 1
),

present as (
    select distinct
        lines.partition_date,
        lines.extraction_batch,
        lines.line_id
    from lines
    semi join several_batches using (partition_date)
),

retracted_by_snapshot as (
    select distinct
        latest.partition_date,
        latest.line_id
    from latest
    inner join several_batches using (partition_date)
    inner join batches
        on
            latest.partition_date = batches.partition_date
            and batches.kind = 'snapshot'
            and latest.source_sequence < batches.source_high_sequence
    anti join present
        on
            present.partition_date = batches.partition_date
            and present.extraction_batch = batches.batch_id
            and present.line_id = latest.line_id
),

final as (
    select latest.*
    from latest
    anti join retracted_by_snapshot using (partition_date, line_id)
    where latest.op <> 'delete'
)

select * from final
