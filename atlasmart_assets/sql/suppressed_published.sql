-- Per published day and deletion request: published lines of the request's subject (which a backfill would drop).
with published as (
    select * from published.order_lines
),

deletion_keys as (
    select * from deletion_keys_in_force
),

final as (
    select
        published.partition_date,
        deletion_keys.request_id,
        count(distinct published.line_id) as lines
    from published
    inner join deletion_keys
        on published.customer_id = deletion_keys.customer_id or published.line_id = deletion_keys.line_id
    group by published.partition_date, deletion_keys.request_id
)

select * from final order by partition_date, request_id
