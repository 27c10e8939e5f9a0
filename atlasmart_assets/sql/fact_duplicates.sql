-- Per day of a fact-shaped relation named {fact} (an identifier chosen by code, never a value): the line ids held
-- more than once, and nothing else (the published uniqueness check needs no totals).
select
    partition_date,
    count(*) - count(distinct line_id) as duplicate_line_ids
from {fact}
where partition_date between $start and $end
group by partition_date
order by partition_date
