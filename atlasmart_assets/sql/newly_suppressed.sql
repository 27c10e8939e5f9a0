-- Per day: the suppressed lines (candidate.suppressed_lines, which credits each line to one request) that no request
-- the day's current version applied names, by its customer or its line id (applied_requests, a temp
-- table: partition_date, request_id). A line left out by the current version under any request naming it is not a new
-- suppression. Counted here, not per line in Python: with 3,000 requests a year's 4.4 M suppressed lines, each with
-- its requests, were 2 GB of the audit's process. Two equality joins, one per kind of key (suppressed_lines.sql).
with suppressed as not materialized (
    select
        partition_date,
        line_id,
        customer_id
    from candidate.suppressed_lines
    where partition_date between $start and $end
),

applied_keys as (
    select
        applied.partition_date,
        keys.customer_id,
        keys.line_id
    from applied_requests as applied
    inner join candidate.deletion_keys as keys on applied.request_id = keys.request_id
),

seen as (
    select
        suppressed.partition_date,
        suppressed.line_id
    from suppressed
    inner join applied_keys
        on suppressed.partition_date = applied_keys.partition_date
        and suppressed.customer_id = applied_keys.customer_id
    union all
    select
        suppressed.partition_date,
        suppressed.line_id
    from suppressed
    inner join applied_keys
        on suppressed.partition_date = applied_keys.partition_date
        and suppressed.line_id = applied_keys.line_id
)

select
    suppressed.partition_date,
    count(*) as lines
from suppressed
anti join seen using (partition_date, line_id)
group by suppressed.partition_date
