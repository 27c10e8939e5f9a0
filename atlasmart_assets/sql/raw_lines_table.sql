-- candidate.raw_lines: the window's records as raw_lines.sql reads them, one row per record with its batch
-- file. Filled from two sources: the files parsed by this run (raw_lines.sql) and the batches already loaded
-- from byte-identical files, read back from the warehouse (raw_lines_loaded.sql). A test holds these columns
-- to raw_lines.sql's.
create or replace table candidate.raw_lines (
    file varchar,
    partition_date date,
    extraction_batch varchar,
    op varchar,
    line_id varchar,
    order_id varchar,
    customer_id varchar,
    sku varchar,
    quantity bigint,
    unit_price decimal(18, 2),
    unit_cost decimal(18, 2),
    event_time timestamp,
    source_sequence bigint,
    problem varchar
)
