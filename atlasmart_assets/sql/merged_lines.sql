-- The day's evidence: its landing batches merged (candidate.merge_losers, from merge_losers.sql, lists the records
-- that lose). What is left of a line is its winning record, unless that record is a `delete` (a retraction).
select lines.*
from candidate.raw_lines as lines
anti join candidate.merge_losers as losers on lines.rowid = losers.row_id
where lines.op <> 'delete'
