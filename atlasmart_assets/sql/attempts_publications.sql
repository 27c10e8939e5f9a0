-- The publications of the days of $start..$end by one of $runs (a retried run's earlier attempts), each with the
-- publication it replaced: a retry walks back through them from the version it replaced itself. The last column is the
-- ledger's repaired column, or null where a reader meets a warehouse not migrated to 015.
select partition_date::varchar, publication_id, prev_publication_id, {repaired}
from audit.publications
where list_contains($runs, run_id) and partition_date between $start and $end
