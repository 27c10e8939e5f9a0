-- Per published day and deletion request: published lines of the request's subject (which a backfill would drop).
-- Two equality joins, one per kind of key (suppressed_lines.sql); `published` is read by both, not written out.
with published as not materialized (
    select * from published.order_lines
),

deletion_keys as (
    select * from deletion_keys_in_force
),

named as (
    select
        published.partition_date,
        deletion_keys.request_id,
        published.line_id
    from published
    inner join deletion_keys on published.customer_id = deletion_keys.customer_id
    union all
    select
        published.partition_date,
        deletion_keys.request_id,
        published.line_id
    from published
    inner join deletion_keys on published.line_id = deletion_keys.line_id
),

final as (
    select
        partition_date,
        request_id,
        count(distinct line_id) as lines
    from named
    group by partition_date, request_id
)

select * from final order by partition_date, request_id
