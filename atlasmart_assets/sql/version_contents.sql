-- Every ledger row of [$start, $end] with its content: the staged lines' fingerprint with the published sha256 (a
-- version without a fingerprint, stored before the store kept one, is a content of its own, and so is a rollback to
-- it). A re-run that kept a day as published, and a rollback, are versions with the content of the one they repeat.
select
    p.partition_date,
    p.publication_id,
    p.seq,
    coalesce(d.fingerprint, p.publication_id) || ' ' || coalesce(p.sha256_after, '') as content
from audit.publications as p
left join audit.day_versions as d using (partition_date, publication_id)
where p.partition_date between $start and $end
