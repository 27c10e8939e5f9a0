-- The lines of the batches in candidate.reused_batches of the days $days only, read back from the warehouse's
-- raw.order_lines (attached as w) into the run's scratch. $start..$end (the first and last of $days) lets the scan
-- skip other days' row groups; a day between them is not read: it may be read where it is loaded, or copied
-- already. Each batch was loaded from a file with the sha256 its batch file has now and every one of its lines is
-- loaded: the same records as parsing the file again, which passed every audit when it was loaded (so no problem).
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
inner join (
    select * from candidate.reused_batches where list_contains($days::date[], partition_date)
) as reused
    on
        lines.partition_date = reused.partition_date
        and lines.extraction_batch = reused.batch_id
where lines.partition_date between $start and $end
