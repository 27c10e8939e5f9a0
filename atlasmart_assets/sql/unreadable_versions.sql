-- For each (day, deletion request) of new_pairs (see retained_subject_lines.sql), whether the day has a published
-- version other than publication $pub whose lines the version store no longer holds (past retention) while its
-- extract is not erased yet: what it held cannot be read, so it is taken to hold a line the request names.
select distinct
    pubs.partition_date,
    keys.request_id
from audit.publications as pubs
inner join new_pairs as keys on pubs.partition_date = keys.partition_date
where
    pubs.publication_id <> $pub
    and pubs.rows_after > 0
    and not starts_with(coalesce(pubs.extract_json, ''), '{"erased"')
    and not exists (
        select 1
        from audit.ledger_versions as l
        inner join versions.fct_order_lines as v
            on v.partition_date = l.partition_date and v.version = l.version
        where l.partition_date = pubs.partition_date and l.publication_id = pubs.publication_id
    )
