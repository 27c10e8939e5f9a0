-- The orders of $days whose lines fall in more than one of the mart's country x tier groups: the mart counts such
-- an order once in each group, the fact once. Each with its customers (and their group) and the batch files its
-- lines came from; read only for the days whose mart and fact controls differ.
with split as (
    select partition_date, order_id
    from candidate.fct_order_lines
    where partition_date between $start and $end and list_contains($days, partition_date)
    group by partition_date, order_id
    having count(distinct (country, tier)) > 1
),

lines as (
    select fct.partition_date, fct.order_id, fct.customer_id, fct.country, fct.tier, batches.file
    from candidate.fct_order_lines as fct
    inner join split using (partition_date, order_id)
    left join candidate.merged_lines as merged using (partition_date, line_id)
    left join candidate.raw_batches as batches
        on merged.partition_date = batches.partition_date and merged.extraction_batch = batches.batch_id
)

select
    partition_date::varchar as partition_date,
    order_id,
    list_sort(list(distinct customer_id || ' (' || country || ', ' || tier || ')')) as customers,
    list_sort(list(distinct file) filter (where file is not null)) as files
from lines
group by partition_date, order_id
order by partition_date, order_id
