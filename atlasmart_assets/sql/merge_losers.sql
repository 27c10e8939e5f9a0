-- The records of candidate.raw_lines that do not survive the merge of their day's landing batches, by rowid: per
-- line_id the record with the highest source_sequence wins and every other record of the line loses; a snapshot
-- batch retracts every line of the day it does not contain whose latest record is older than the snapshot's
-- source_high_sequence (all its records lose). A winning `delete` is dropped by merged_lines.sql. Only days with
-- several batches can retract by snapshot (a day's only batch holds every line of the day), and only lines held
-- by several records are ranked (candidate.repeated_lines, from repeated_lines.sql).
-- Listing the few losers instead of writing out the many winners: a year's merged copy took 7 s to write.
-- The tables are named in each branch, not through a shared CTE: DuckDB fans a CTE with several consumers out
-- as one stream, and a window over 7.3 M rows then ran 2-3x slower than on its own scan (measured on a year).
with several_batches as (
    select partition_date
    from candidate.raw_batches as batches
    group by partition_date
    having count(*) > 1
),

latest_sequence as (
    select
        partition_date,
        line_id,
        max(source_sequence) as source_sequence
    from candidate.raw_lines as lines
    semi join several_batches using (partition_date)
    group by partition_date, line_id
),

present as (
    select distinct
        lines.partition_date,
        lines.extraction_batch,
        lines.line_id
    from candidate.raw_lines as lines
    semi join several_batches using (partition_date)
),

retracted_by_snapshot as (
    select distinct
        latest_sequence.partition_date,
        latest_sequence.line_id
    from latest_sequence
    inner join candidate.raw_batches as batches
        on
            latest_sequence.partition_date = batches.partition_date
            and batches.kind = 'snapshot'
            and latest_sequence.source_sequence < batches.source_high_sequence
    anti join present
        on
            present.partition_date = batches.partition_date
            and present.extraction_batch = batches.batch_id
            and present.line_id = latest_sequence.line_id
),

outranked as (
    select lines.rowid as row_id
    from candidate.raw_lines as lines
    semi join candidate.repeated_lines as repeated on hash(lines.partition_date, lines.line_id) = repeated.key_hash
    qualify row_number() over (partition by partition_date, line_id order by source_sequence desc) > 1
),

retracted as (
    select lines.rowid as row_id
    from candidate.raw_lines as lines
    semi join retracted_by_snapshot using (partition_date, line_id)
),

final as (
    select row_id from outranked
    union
    select row_id from retracted
)

select * from final
