-- The published versions of $days other than publication $pub whose lines the version store no longer holds (past
-- retention) while their extract is not erased yet, with the deletion requests each was built under (applied, or
-- naming a record of its evidence): what such a version held cannot be read, so it may hold a line a request names
-- unless it was built under one naming the same key (publish._held decides).
select
    pubs.partition_date,
    pubs.requests_applied,
    d.requests_named
from audit.publications as pubs
left join audit.day_versions as d using (partition_date, publication_id)
where
    pubs.partition_date in (select unnest($days::date[]))
    and pubs.publication_id <> $pub
    and pubs.rows_after > 0
    and not starts_with(coalesce(pubs.extract_json, ''), '{"erased"')
    and not exists (
        select 1
        from audit.ledger_versions as l
        inner join versions.fct_order_lines as v
            on v.partition_date = l.partition_date and v.version = l.version
        where l.partition_date = pubs.partition_date and l.publication_id = pubs.publication_id
    )
