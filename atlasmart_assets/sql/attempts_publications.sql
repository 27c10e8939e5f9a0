-- The publications of the days of $start..$end by one of $runs (a retried run's earlier attempts), each with the
-- publication it replaced: a retry walks back through them from the version it replaced itself.
select partition_date::varchar, publication_id, prev_publication_id
from audit.publications
where list_contains($runs, run_id) and partition_date between $start and $end
