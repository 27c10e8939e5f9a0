-- The days of the run's scratch evidence (candidate.raw_lines) holding a record, winning or not, whose customer
-- or line id a deletion request names (requested_keys: request_id, customer_id, line_id). Such a day is built,
-- never kept as published: the build decides what the request takes out of it.
select distinct lines.partition_date
from candidate.raw_lines as lines
where
    lines.partition_date between $start and $end
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
