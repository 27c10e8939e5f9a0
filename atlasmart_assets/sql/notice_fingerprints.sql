-- Per ledger row of the publications a notice covers ({where}: a predicate on p chosen by code, its value bound as
-- $v): the fingerprint of the staged lines it published, and of those of the version it replaced.
select
    p.seq,
    p.partition_date::varchar as partition_date,
    after.fingerprint as fingerprint_after,
    before.fingerprint as fingerprint_before
from audit.publications as p
left join audit.day_versions as after
    on p.partition_date = after.partition_date and p.publication_id = after.publication_id
left join audit.day_versions as before
    on p.partition_date = before.partition_date and p.prev_publication_id = before.publication_id
where {where}
order by p.seq
