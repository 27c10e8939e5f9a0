-- Records that make the merge non-deterministic: the same line_id and source_sequence with different content,
-- in one batch or across batches of a day (which one would win is not determined). Only keys held by more than
-- one record are compared (hashing every record's content is most of the cost otherwise).
with lines as (
    select * from candidate.raw_lines
    where line_id is not null and source_sequence is not null
),

repeated as (
    select
        partition_date,
        line_id,
        source_sequence
    from lines
    group by partition_date, line_id, source_sequence
    having count(*) > 1
),

final as (
    select
        partition_date,
        line_id,
        source_sequence,
        list(distinct extraction_batch order by extraction_batch) as batches
    from lines
    semi join repeated using (partition_date, line_id, source_sequence)
    group by partition_date, line_id, source_sequence
    having count(distinct md5(concat_ws('|', op, order_id, customer_id, sku, quantity, unit_price, unit_cost,
                                        event_time))) > 1
)

select * from final order by partition_date, line_id
