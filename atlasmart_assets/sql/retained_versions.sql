-- The versions of each day of [$start, $end] that retention keeps: its $retain newest ledger rows (the current
-- one and those before it), and the newest version of each of its $retain newest contents (version_contents.sql).
-- A re-run that kept a day as published repeats its predecessor's content: counted as versions alone, ten of them
-- took every slot and put the version before a correction past a rollback's reach. At most 2 x $retain a day.
with versions as (
    {contents}
),

ranked as (
    select
        partition_date,
        publication_id,
        seq,
        row_number() over (partition by partition_date order by seq desc) as newest_version,
        row_number() over (partition by partition_date, content order by seq desc) = 1 as newest_of_content
    from versions
),

contents as (
    select
        partition_date,
        publication_id,
        newest_version,
        case when newest_of_content
            then row_number() over (partition by partition_date, newest_of_content order by seq desc)
        end as content_rank
    from ranked
)

select
    partition_date,
    publication_id
from contents
where newest_version <= $retain or content_rank <= $retain
