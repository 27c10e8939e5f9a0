-- One row per line id and day of the merged evidence (candidate.merged_lines) less the lines deletion requests
-- suppress, joined to the customer version valid at order time. {days} is `true` when the run builds every day of
-- the window, else a filter to the days it builds (chosen by code, never a value: see candidates.build_staged).
-- `latest` is read by both `orders` and `final`: DuckDB would write it out once for the two. Not materialized, each
-- reads the merged lines itself (a year's 7.3 M lines into a table, measured apart: 6.2 s and 886 MiB at the peak,
-- against 7.9 s and 1,072 MiB; the same rows).
with latest as not materialized (
    select merged.*
    from candidate.merged_lines as merged
    anti join candidate.suppressed_lines using (partition_date, line_id)
    where merged.partition_date between $start and $end and {days}
),

customers as (
    select * from candidate.customers
),

orders as (
    select
        partition_date,
        order_id,
        min(event_time) as order_time
    from latest
    group by partition_date, order_id
),

final as (
    select
        latest.partition_date,
        latest.line_id,
        latest.order_id,
        latest.customer_id,
        coalesce(customers.country, 'unknown') as country,
        coalesce(customers.tier, 'unknown') as tier,
        latest.sku,
        latest.quantity,
        latest.unit_price,
        latest.unit_cost,
        orders.order_time,
        latest.event_time,
        latest.source_sequence
    from latest
    inner join orders using (partition_date, order_id)
    left join customers
        on
            latest.customer_id = customers.customer_id
            and orders.order_time >= customers.valid_from
            and (customers.valid_to is null or orders.order_time < customers.valid_to)
)

select * from final
