-- Per day of the fact candidate: its lines a deletion request names, by customer or by line id (one count per key
-- naming a line; the audit wants none). Two equality joins, one per kind of key (suppressed_lines.sql).
with fact as not materialized (
    select
        partition_date,
        customer_id,
        line_id
    from candidate.fct_order_lines
    where partition_date between $start and $end
),

named as (
    select fact.partition_date
    from fact
    inner join candidate.deletion_keys as keys on fact.customer_id = keys.customer_id
    union all
    select fact.partition_date
    from fact
    inner join candidate.deletion_keys as keys on fact.line_id = keys.line_id
)

select
    partition_date,
    count(*) as lines
from named
group by partition_date
