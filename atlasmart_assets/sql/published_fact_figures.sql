-- Per day of the published fact named {fact} (an identifier chosen by code, never a value), in one pass: the six
-- controls the mart must match, and the line ids held more than once (both published checks read this).
select
    partition_date,
    count(*) as lines,
    count(distinct order_id) as orders,
    sum(quantity) as units,
    sum(gmv) as gmv,
    sum(cost) as cost,
    sum(gross_profit) as gross_profit,
    count(*) - count(distinct line_id) as duplicate_line_ids
from {fact}
where partition_date between $start and $end
group by partition_date
order by partition_date
