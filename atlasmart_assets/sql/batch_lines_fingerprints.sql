-- Per landing batch of {lines} (a relation with raw.order_lines' line columns, partition_date and
-- extraction_batch): a fingerprint of its lines whatever their order, their count and the sum of each line's hash.
-- DuckDB's version leads it: its hash is not promised stable across releases, and a fingerprint of another release
-- is never compared (the batch is parsed and loaded again, which records a new one). A line loaded before raw kept
-- its op has none: it reads as the upsert it was.
select
    partition_date,
    extraction_batch,
    version() || ': ' || count(*) || ' lines, hash sum ' || sum(hash(
        line_id, order_id, customer_id, sku, quantity, unit_price, unit_cost, event_time, source_sequence,
        coalesce(op, 'upsert')
    ))::varchar as lines_fingerprint
from {lines}
group by partition_date, extraction_batch
