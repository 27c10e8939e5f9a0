-- Per day of a staged-shaped relation named {staged} (an identifier chosen by code, never a value): lines, lines
-- whose customer did not resolve to a dimension version, and a fingerprint of the lines (the sum of their hashes:
-- equal multisets of lines, equal sums) that lets a publish find a day unchanged. Its repeated line ids are
-- line_id_repeats.sql's.
select
    partition_date,
    count(*) as lines,
    count(*) filter (where tier = 'unknown') as unresolved_customers,
    sum(cast(hash(
        partition_date, line_id, order_id, customer_id, country, tier, sku, quantity, unit_price, unit_cost,
        order_time, event_time, source_sequence
    ) as hugeint)) as fingerprint
from {staged}
where partition_date between $start and $end
group by partition_date
order by partition_date
