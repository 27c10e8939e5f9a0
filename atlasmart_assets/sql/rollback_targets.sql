-- Each partition of [$start, $end] the ledger publishes now: its current publication, the version it shows (a
-- rollback's content is the version it restored) and whether the ledger holds that version, with its
-- predecessor; and whether publication $to published the partition. One read for the whole window: a year's
-- rollback asked two point queries a day in one hold, its longest (0.41-0.44 s, growing with the ledger).
with now as (
    select
        partition_date,
        publication_id,
        coalesce(restored_from, publication_id) as shown_id
    from audit.current_publications
    where partition_date between $start and $end
)

select
    now.partition_date::varchar as partition_date,
    now.publication_id,
    now.shown_id,
    shown.publication_id is not null as shown_found,
    shown.prev_publication_id,
    target.publication_id is not null as to_found
from now
left join audit.publications shown
    on shown.partition_date = now.partition_date and shown.publication_id = now.shown_id
left join audit.publications target
    on target.partition_date = now.partition_date and target.publication_id = $to
order by now.partition_date
