-- Per day of a staged-shaped relation named {staged} (an identifier chosen by code, never a value): lines,
-- duplicate line ids and lines whose customer did not resolve to a dimension version.
select
    partition_date,
    count(*) as lines,
    count(*) - count(distinct line_id) as duplicate_line_ids,
    count(*) filter (where tier = 'unknown') as unresolved_customers
from {staged}
where partition_date between $start and $end
group by partition_date
order by partition_date
