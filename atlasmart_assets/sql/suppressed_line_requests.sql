-- Per suppressed line (candidate.suppressed_lines, which credits each line to one request): every request that
-- names it, by its customer or its line id. A line left out by its day's current version under any of them is not
-- a new suppression (suppressed_lines.sql's join, without its choice of one).
with suppressed as (
    select partition_date, line_id, customer_id
    from candidate.suppressed_lines
    where partition_date between $start and $end
),

deletion_keys as (
    select
        cast(request_id as varchar) as request_id,
        cast(customer_id as varchar) as customer_id,
        cast(line_id as varchar) as line_id
    from candidate.deletion_keys
),

final as (
    select
        suppressed.partition_date,
        suppressed.line_id,
        list(distinct deletion_keys.request_id) as requests
    from suppressed
    inner join deletion_keys
        on suppressed.customer_id = deletion_keys.customer_id or suppressed.line_id = deletion_keys.line_id
    group by suppressed.partition_date, suppressed.line_id
)

select partition_date, requests from final
