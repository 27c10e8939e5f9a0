-- Per file: records, required fields missing, and control totals over the latest version of each line.
with lines as (
    select * from candidate.raw_lines
),

latest as (
    select *
    from lines
    qualify row_number() over (partition by file, line_id order by source_sequence desc) = 1
),

shape as (
    select
        file,
        count(*) as records,
        count(*) filter (where line_id is null) as missing_line_id,
        count(*) filter (where order_id is null) as missing_order_id,
        count(*) filter (where customer_id is null) as missing_customer_id,
        count(*) filter (where sku is null) as missing_sku,
        count(*) filter (where quantity is null and problem is null) as missing_quantity,
        count(*) filter (where unit_price is null and problem is null) as missing_unit_price,
        count(*) filter (where unit_cost is null and problem is null) as missing_unit_cost,
        count(*) filter (where event_time is null) as missing_event_time,
        count(*) filter (where source_sequence is null and problem is null) as missing_source_sequence,
        count(*) filter (where problem is not null) as invalid_values,
        min(line_id || ': ' || problem) filter (where problem is not null) as first_invalid
    from lines
    group by file
),

controls as (
    select
        file,
        count(*) as lines,
        count(distinct order_id) as orders,
        coalesce(sum(quantity), 0) as units,
        coalesce(sum(quantity * unit_price), 0) as gmv,
        coalesce(sum(quantity * unit_cost), 0) as cost,
        coalesce(sum(quantity * unit_price) - sum(quantity * unit_cost), 0) as gross_profit
    from latest
    group by file
),

final as (
    select *
    from shape
    left join controls using (file)
)

select * from final
