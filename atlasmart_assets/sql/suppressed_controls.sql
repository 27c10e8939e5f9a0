-- Per day: what the suppressed lines take out of the day's controls (an order counts only when every one of its
-- lines is suppressed), and which requests did it. Published controls = latest batch's controls minus these.
with suppressed as (
    select * from candidate.suppressed_lines
),

remaining as (
    select merged.partition_date, merged.order_id
    from candidate.merged_lines as merged
    anti join suppressed using (partition_date, line_id)
    where merged.partition_date between $start and $end
),

gone_orders as (
    select distinct partition_date, order_id from suppressed
    anti join remaining using (partition_date, order_id)
),

final as (
    select
        suppressed.partition_date,
        count(*) as lines,
        (select count(*) from gone_orders where gone_orders.partition_date = suppressed.partition_date) as orders,
        coalesce(sum(quantity), 0) as units,
        coalesce(sum(quantity * unit_price), 0) as gmv,
        coalesce(sum(quantity * unit_cost), 0) as cost,
        coalesce(sum(quantity * unit_price) - sum(quantity * unit_cost), 0) as gross_profit,
        list(distinct request_id order by request_id) as requests
    from suppressed
    group by suppressed.partition_date
)

select * from final order by partition_date
