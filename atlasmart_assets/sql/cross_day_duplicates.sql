-- Per candidate day: line ids that also appear on another day, in the candidate window or in the published
-- relation {published} (the published fact outside the window; an identifier chosen by code, never a value).
-- A line id is on two days when its earliest and latest day differ: one pass over the window's line ids (counting
-- distinct days per line id took three times as long for a year). A published line id not in the candidate may
-- be counted here; the final semi join reports candidate lines only.
with candidate as (
    select partition_date, line_id from candidate.staged_order_lines
),

published as (
    {published}
),

everywhere as (
    select * from candidate
    union all
    select * from published
),

shared as (
    select line_id
    from everywhere
    group by line_id
    having min(partition_date) <> max(partition_date)
),

final as (
    select
        candidate.partition_date,
        list(candidate.line_id order by candidate.line_id)[1:20] as line_ids
    from candidate
    semi join shared using (line_id)
    group by candidate.partition_date
)

select * from final order by partition_date
