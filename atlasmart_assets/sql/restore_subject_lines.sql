-- Per day to restore and deletion request in force: how many lines of the version a rollback would restore
-- (`sources`: partition_date, publication_id, the version whose rows it reads) the request names, by customer or by
-- line id, in the version store (the fact's view reads every stored version). Restoring such a version would
-- publish a suppressed subject again. Two equality joins, one per kind of key: DuckDB runs a join on `or` as a
-- nested loop.
with restored as not materialized (
    select
        v.partition_date,
        v.line_id,
        v.customer_id
    from versions.fct_order_lines as v
    inner join audit.ledger_versions as l using (partition_date, version)
    inner join sources as t on t.partition_date = l.partition_date and t.publication_id = l.publication_id
),

named as (
    select
        restored.partition_date,
        keys.request_id,
        restored.line_id
    from restored
    inner join restore_deletion_keys as keys on restored.customer_id = cast(keys.customer_id as varchar)
    union all
    select
        restored.partition_date,
        keys.request_id,
        restored.line_id
    from restored
    inner join restore_deletion_keys as keys on restored.line_id = cast(keys.line_id as varchar)
)

select
    partition_date,
    request_id,
    count(distinct line_id) as lines
from named
group by partition_date, request_id
order by partition_date, request_id
