-- The newest rollback publication of the window $start..$end that one of $runs (a retried run's earlier attempts)
-- committed: its id, and each day's publication it replaced (null for none).
select
    publication_id,
    list(partition_date::varchar order by partition_date) as days,
    list(prev_publication_id order by partition_date) as replaced
from audit.publications
where
    kind = 'rollback'
    and list_contains($runs, run_id)
    and partition_date between $start and $end
group by publication_id
order by max(seq) desc
limit 1
