-- The six controls per day of a fact-shaped relation named {fact} (an identifier chosen by code, never a value).
-- Its repeated line ids are counted apart, where an audit needs them (line_id_repeats.sql for the candidate,
-- fact_duplicates.sql for the published fact alone, published_fact_figures.sql with these controls in
-- one pass), not in every read of the controls.
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
