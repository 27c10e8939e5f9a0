-- Per day of the window as staged.order_lines shows it now: the lines whose customer did not resolve to a
-- dimension version (a rollback's staged events carry them, as a correction's do from staged_controls.sql).
select partition_date::varchar, count(*) filter (where tier = 'unknown') as unresolved_customers
from staged.order_lines
where partition_date between $start and $end
group by partition_date
