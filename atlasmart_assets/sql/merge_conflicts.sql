-- Records that make the merge non-deterministic: the same line_id and source_sequence with different content,
-- in one batch or across batches of a day (which one would win is not determined). Only keys held by more than
-- one record are compared. They are found by the hash of the key, one integer to group on instead of a date, a
-- string and a number (the bench's year, which repeats no key: 2.3-2.7 s -> 1.2-1.4 s); a collision only adds a key
-- whose records are then compared on the key itself. Content is compared as a struct, where a null differs from
-- every value (a text joined with concat_ws skipped nulls: ('a', null) and (null, 'a') read the same). The table is
-- named in each branch, not through a shared CTE (see merged_lines.sql).
with repeated as (
    select hash(partition_date, line_id, source_sequence) as key_hash
    from candidate.raw_lines
    where partition_date is not null and line_id is not null and source_sequence is not null
    group by key_hash
    having count(*) > 1
),

final as (
    select
        lines.partition_date,
        lines.line_id,
        lines.source_sequence,
        list(distinct lines.extraction_batch order by lines.extraction_batch) as batches
    from candidate.raw_lines as lines
    semi join repeated on hash(lines.partition_date, lines.line_id, lines.source_sequence) = repeated.key_hash
    where lines.partition_date is not null and lines.line_id is not null and lines.source_sequence is not null
    group by lines.partition_date, lines.line_id, lines.source_sequence
    having count(distinct {
        'op': lines.op, 'order_id': lines.order_id, 'customer_id': lines.customer_id, 'sku': lines.sku,
        'quantity': lines.quantity, 'unit_price': lines.unit_price, 'unit_cost': lines.unit_cost,
        'event_time': lines.event_time
    }) > 1
)

select * from final order by partition_date, line_id
