-- The keys (partition_date, line_id) of candidate.raw_lines held by more than one record, by their hash: one
-- integer to group on; a collision only adds a key whose records are then ranked or compared on the key itself.
-- Written once for the merge (merge_losers.sql ranks only these) and the determinism audit (merge_conflicts.sql:
-- two records with the same key and sequence are two records with the same key): each grouped a year's 7.3 M
-- records on its own, 1.0-1.2 s apiece.
select hash(partition_date, line_id) as key_hash
from candidate.raw_lines
group by key_hash
having count(*) > 1
