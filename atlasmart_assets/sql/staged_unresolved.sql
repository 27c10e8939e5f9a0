-- Per day of the window, the staged lines of publication $p (wherever the version store holds them) whose customer
-- did not resolve to a dimension version: a rollback's staged events carry them, as a correction's do from
-- staged_controls.sql.
select v.partition_date::varchar, count(*) filter (where v.tier = 'unknown') as unresolved_customers
from versions.staged_order_lines as v
inner join audit.ledger_versions as l using (partition_date, version)
where l.publication_id = $p and v.partition_date between $start and $end
group by v.partition_date
