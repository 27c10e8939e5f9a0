-- A day's mart rows in the canonical order extracts use.
select
    partition_date,
    country,
    tier,
    lines,
    orders,
    units,
    gmv,
    cost,
    gross_profit
from {mart}
where partition_date between $start and $end
order by partition_date, country, tier
