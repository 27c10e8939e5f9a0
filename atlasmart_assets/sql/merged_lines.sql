-- The day's evidence: its landing batches merged. Per line_id the record with the highest source_sequence wins;
-- a winning `delete` retracts the line; a snapshot batch retracts every line it does not contain whose latest
-- record is older than the snapshot's source_high_sequence.
with lines as (
    select * from candidate.raw_lines
),

batches as (
    select * from candidate.raw_batches
),

latest as (
    select *
    from lines
    qualify row_number() over (partition by partition_date, line_id order by source_sequence desc) = 1
),

present as (
    select distinct partition_date, extraction_batch, line_id from lines
),

retracted_by_snapshot as (
    select distinct
        latest.partition_date,
        latest.line_id
    from latest
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
