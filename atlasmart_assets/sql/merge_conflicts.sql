-- Records that make the merge non-deterministic: the same line_id and source_sequence with different content,
-- in one batch or across batches of a day (which one would win is not determined). Only the records of keys held
-- by more than one record are compared (candidate.repeated_lines, from repeated_lines.sql). Content is compared as
-- a struct, where a null differs from every value (a text joined with concat_ws skipped nulls: ('a', null) and
-- (null, 'a') read the same).
with final as (
    select
        lines.partition_date,
        lines.line_id,
        lines.source_sequence,
        list(distinct lines.extraction_batch order by lines.extraction_batch) as batches
    from candidate.raw_lines as lines
    semi join candidate.repeated_lines as repeated
        on hash(lines.partition_date, lines.line_id) = repeated.key_hash
    where lines.partition_date is not null and lines.line_id is not null and lines.source_sequence is not null
    group by lines.partition_date, lines.line_id, lines.source_sequence
    having count(*) > 1 and count(distinct {
        'op': lines.op, 'order_id': lines.order_id, 'customer_id': lines.customer_id, 'sku': lines.sku,
        'quantity': lines.quantity, 'unit_price': lines.unit_price, 'unit_cost': lines.unit_cost,
        'event_time': lines.event_time
    }) > 1
)

select * from final order by partition_date, line_id
