-- One row per order line (business key line_id) with its money figures, for every day of the staged candidate
-- (a view: no parameters; its readers filter the window).
with staged as (
    select * from candidate.staged_order_lines
),

final as (
    select
        partition_date,
        line_id,
        order_id,
        customer_id,
        country,
        tier,
        sku,
        quantity,
        unit_price,
        unit_cost,
        cast(quantity * unit_price as decimal(18, 2)) as gmv,
        cast(quantity * unit_cost as decimal(18, 2)) as cost,
        cast(quantity * unit_price - quantity * unit_cost as decimal(18, 2)) as gross_profit,
        event_time,
        source_sequence
    from staged
)

select * from final
