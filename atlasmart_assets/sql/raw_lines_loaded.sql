-- The lines of the batches in candidate.reused_batches, days $start..$end, read back from the warehouse's
-- raw.order_lines (attached as w) into the run's scratch. Each was loaded from a file with the sha256 its batch
-- file has now and every one of its lines is loaded: the same records as parsing the file again, which passed
-- every audit when it was loaded (so no problem).
insert into candidate.raw_lines by name
select
    reused.file,
    lines.partition_date,
    lines.extraction_batch,
    lines.op,
    lines.line_id,
    lines.order_id,
    lines.customer_id,
    lines.sku,
    lines.quantity,
    lines.unit_price,
    lines.unit_cost,
    lines.event_time,
    lines.source_sequence,
    cast(null as varchar) as problem
from w.raw.order_lines as lines
inner join candidate.reused_batches as reused
    on
        lines.partition_date = reused.partition_date
        and lines.extraction_batch = reused.batch_id
where lines.partition_date between $start and $end
