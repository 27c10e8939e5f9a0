-- Control totals per day of a mart-shaped relation named {mart} (an identifier chosen by code, never a value).
select
    partition_date,
    sum(lines) as lines,
    sum(orders) as orders,
    sum(units) as units,
    sum(gmv) as gmv,
    sum(cost) as cost,
    sum(gross_profit) as gross_profit
from {mart}
where partition_date between $start and $end
group by partition_date
order by partition_date
