-- The days of the run's evidence ({lines}: the scratch's candidate.raw_lines, or the warehouse's raw.order_lines
-- for the days profiled where they are loaded) holding a record, winning or not, whose customer or line id a
-- deletion request names (requested_keys: request_id, customer_id, line_id), with each such request. A day is built
-- unless its current version applied exactly these requests: the build decides what a request takes out of it.
-- Two joins, not one on `customer_id = ... or line_id = ...`, which DuckDB runs as a nested loop.
select distinct
    lines.partition_date,
    keys.request_id
from {lines} as lines
inner join requested_keys as keys
    on lines.customer_id = cast(keys.customer_id as varchar)
where
    lines.partition_date between $start and $end
    and {days}
union
select distinct
    lines.partition_date,
    keys.request_id
from {lines} as lines
inner join requested_keys as keys
    on lines.line_id = cast(keys.line_id as varchar)
where
    lines.partition_date between $start and $end
    and {days}
