-- Per day of $start..$end published by one of $runs (a retried run's earlier attempts): the publication the first
-- of those publications replaced (null for a day they published first).
select partition_date::varchar, prev_publication_id
from audit.publications
where list_contains($runs, run_id) and partition_date between $start and $end
qualify row_number() over (partition by partition_date order by seq) = 1
