-- The six controls per day of a fact-shaped relation named {fact} (an identifier chosen by code, never a value),
-- without fact_controls.sql's duplicate count: a published check that compares totals needs no count of distinct
-- line ids (it took over half of a year's scan). A query of its own, not a select of fewer columns over
-- fact_controls.sql: DuckDB still computes every aggregate of the subquery (2.3 s against 0.9 s for a year).
select
    partition_date,
    count(*) as lines,
    count(distinct order_id) as orders,
    sum(quantity) as units,
    sum(gmv) as gmv,
    sum(cost) as cost,
    sum(gross_profit) as gross_profit
from {fact}
where partition_date between $start and $end
group by partition_date
order by partition_date
