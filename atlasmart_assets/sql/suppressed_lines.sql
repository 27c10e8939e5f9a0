-- Lines of the merged evidence that a deletion request suppresses (its customer, or its line ids), with the
-- request that suppresses each: they never reach staged, fact, mart or the extracts. For the days the run builds
-- ({days}: see staged_order_lines.sql). A request names a customer or line ids, one per key row: two equality joins,
-- one per kind of key, not one join on `customer_id = ... or line_id = ...`, which DuckDB runs as a nested loop
-- (lines x keys: a year's build with 3,000 requests ran out of memory). `merged` is read by both, not written out.
with merged as not materialized (
    select * from candidate.merged_lines as merged
    where partition_date between $start and $end and {days}
),

deletion_keys as (
    select
        cast(request_id as varchar) as request_id,
        cast(customer_id as varchar) as customer_id,
        cast(line_id as varchar) as line_id
    from candidate.deletion_keys
),

named as (
    select
        merged.partition_date,
        merged.line_id,
        merged.order_id,
        merged.customer_id,
        merged.quantity,
        merged.unit_price,
        merged.unit_cost,
        deletion_keys.request_id
    from merged
    inner join deletion_keys on merged.customer_id = deletion_keys.customer_id
    union all
    select
        merged.partition_date,
        merged.line_id,
        merged.order_id,
        merged.customer_id,
        merged.quantity,
        merged.unit_price,
        merged.unit_cost,
        deletion_keys.request_id
    from merged
    inner join deletion_keys on merged.line_id = deletion_keys.line_id
),

final as (
    select *
    from named
    qualify row_number() over (partition by partition_date, line_id order by request_id) = 1
)

select * from final
