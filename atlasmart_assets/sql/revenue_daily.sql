-- One row per day x country x tier.
with fct as (
    select * from candidate.fct_order_lines
),

final as (
    select
        partition_date,
        country,
        tier,
        count(*) as lines,
        count(distinct order_id) as orders,
        sum(quantity) as units,
        cast(sum(gmv) as decimal(18, 2)) as gmv,
        cast(sum(cost) as decimal(18, 2)) as cost,
        cast(sum(gross_profit) as decimal(18, 2)) as gross_profit
    from fct
    group by partition_date, country, tier
)

select * from final
