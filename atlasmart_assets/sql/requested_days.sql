-- The days of the run's evidence ({lines}: the scratch's candidate.raw_lines, or the warehouse's raw.order_lines
-- for the days profiled where they are loaded) holding a record, winning or not, whose customer
-- or line id a deletion request names (requested_keys: request_id, customer_id, line_id). Such a day is built,
-- never kept as published: the build decides what the request takes out of it.
select distinct lines.partition_date
from {lines} as lines
where
    lines.partition_date between $start and $end
    and {days}
    and (
        lines.customer_id in (
            select cast(keys.customer_id as varchar) from requested_keys as keys
            where keys.customer_id is not null
        )
        or lines.line_id in (
            select cast(keys.line_id as varchar) from requested_keys as keys
            where keys.line_id is not null
        )
    )
