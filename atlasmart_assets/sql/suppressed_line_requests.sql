-- Per suppressed line (candidate.suppressed_lines, which credits each line to one request): every request that
-- names it, by its customer or its line id. A line left out by its day's current version under any of them is not
-- a new suppression (suppressed_lines.sql's join, without its choice of one).
-- Two equality joins, one per kind of key (suppressed_lines.sql).
with named as (
    select
        suppressed.partition_date,
        suppressed.line_id,
        keys.request_id
    from candidate.suppressed_lines as suppressed
    inner join candidate.deletion_keys as keys on suppressed.customer_id = keys.customer_id
    where suppressed.partition_date between $start and $end
    union all
    select
        suppressed.partition_date,
        suppressed.line_id,
        keys.request_id
    from candidate.suppressed_lines as suppressed
    inner join candidate.deletion_keys as keys on suppressed.line_id = keys.line_id
    where suppressed.partition_date between $start and $end
)

select
    partition_date,
    list(distinct request_id) as requests
from named
group by partition_date, line_id
