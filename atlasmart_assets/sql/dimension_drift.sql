-- Per published day: lines whose country or tier differ from the customer dimension in force now, at order time
-- (published.order_lines is the warehouse's staged table, attached; dimension is the version in force).
with published as (
    select * from published.order_lines
),

dimension as (
    select * from dimension_in_force
),

final as (
    select
        published.partition_date,
        count(*) as lines
    from published
    left join dimension
        on
            published.customer_id = dimension.customer_id
            and published.order_time >= dimension.valid_from
            and (dimension.valid_to is null or published.order_time < dimension.valid_to)
    where (coalesce(dimension.country, 'unknown'), coalesce(dimension.tier, 'unknown'))
        is distinct from (published.country, published.tier)
    group by published.partition_date
)

select * from final order by partition_date
