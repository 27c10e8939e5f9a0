-- Per candidate day: line ids that also appear on another day, in the candidate window or in the published
-- relation {published} (the published fact outside the window; an identifier chosen by code, never a value).
with candidate as (
    select partition_date, line_id from candidate.fct_order_lines
),

published as (
    {published}
),

everywhere as (
    select * from candidate
    union all
    select * from published
),

days_per_line as (
    select line_id, count(distinct partition_date) as days
    from everywhere
    where line_id in (select line_id from candidate)
    group by line_id
    having count(distinct partition_date) > 1
),

final as (
    select
        candidate.partition_date,
        list(candidate.line_id order by candidate.line_id)[1:20] as line_ids
    from candidate
    inner join days_per_line using (line_id)
    group by candidate.partition_date
)

select * from final order by partition_date
