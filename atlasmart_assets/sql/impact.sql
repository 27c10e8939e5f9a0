-- Per day: line ids a correction would add, remove or change, comparing the candidate fact with the published one.
with candidate as (
    select * from candidate.fct_order_lines
),

published as (
    select * from candidate.fct_published
),

paired as (
    select
        coalesce(candidate.partition_date, published.partition_date) as partition_date,
        coalesce(candidate.line_id, published.line_id) as line_id,
        published.line_id is null as added,
        candidate.line_id is null as removed,
        candidate.line_id is not null and published.line_id is not null
        and (candidate.order_id, candidate.customer_id, candidate.country, candidate.tier, candidate.sku,
             candidate.quantity, candidate.unit_price, candidate.unit_cost, candidate.event_time)
        is distinct from
            (published.order_id, published.customer_id, published.country, published.tier, published.sku,
             published.quantity, published.unit_price, published.unit_cost, published.event_time) as changed,
        candidate.line_id is not null and published.line_id is not null
        and (candidate.country, candidate.tier) is distinct from (published.country, published.tier) as dimension_changed
    from candidate
    full outer join published using (partition_date, line_id)
),

final as (
    select
        partition_date,
        count(*) filter (where added) as lines_added,
        count(*) filter (where removed) as lines_removed,
        count(*) filter (where changed) as lines_changed,
        list(line_id order by line_id) filter (where added or removed or changed)[1:20] as sample_line_ids,
        count(*) filter (where dimension_changed) as lines_tier_or_country_changed
    from paired
    group by partition_date
)

select * from final order by partition_date
