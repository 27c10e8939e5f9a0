-- For each day of $days, the deletion requests credited with a line this build suppresses
-- (s.candidate.suppressed_lines) that a stored version of the day other than publication $pub still holds
-- ({store}: a table of the version store, chosen by code), by line id whatever customer that version gave it: a late
-- batch may move a line to a requesting customer, and the version built before it holds the line under another.
select distinct
    stored.partition_date,
    suppressed.request_id
from {store} as stored
inner join s.candidate.suppressed_lines as suppressed
    on stored.partition_date = suppressed.partition_date and stored.line_id = suppressed.line_id
where stored.publication_id <> $pub and list_contains($days, suppressed.partition_date)
