-- Every superseded version of [$start, $end] a rollback can restore: one retention keeps (temp table keep), or one
-- whose content a kept superseded version holds. Its source is the version whose rows a rollback to it reads:
-- itself if kept, else the newest kept version of its content (the same lines and published figures; the ledger
-- row restored stays the one named, with its own evidence and extract).
with versions as (
    {contents}
),

superseded as (
    select versions.*
    from versions
    anti join audit.current_publications using (partition_date, publication_id)
),

kept as (
    select superseded.*
    from superseded
    semi join keep using (partition_date, publication_id)
)

select
    superseded.partition_date::varchar as partition_date,
    superseded.publication_id,
    coalesce(
        max(case when kept.publication_id = superseded.publication_id then kept.publication_id end),
        arg_max(kept.publication_id, kept.seq)
    ) as source_id
from superseded
inner join kept
    on kept.partition_date = superseded.partition_date and kept.content = superseded.content
group by superseded.partition_date, superseded.publication_id
