-- The six controls per day of the merged evidence (candidate.merged_lines).
select
    partition_date,
    count(*) as lines,
    count(distinct order_id) as orders,
    coalesce(sum(quantity), 0) as units,
    coalesce(sum(quantity * unit_price), 0) as gmv,
    coalesce(sum(quantity * unit_cost), 0) as cost,
    coalesce(sum(quantity * unit_price) - sum(quantity * unit_cost), 0) as gross_profit
from candidate.merged_lines
group by partition_date
order by partition_date
