-- Per batch file: records, required fields missing (a retraction needs only line_id and source_sequence),
-- lines holding invalid values, and the partitions and batches its lines were read under (each line takes them
-- from the manifest of its document: a file of one document has one of each, its manifest's), and the highest
-- source_sequence its lines carry (a manifest's source_high_sequence is at least that).
with lines as (
    select *, op = 'delete' as retraction from candidate.raw_lines
),

final as (
    select
        file,
        count(*) as records,
        count(*) filter (where line_id is null) as missing_line_id,
        count(*) filter (where order_id is null and not retraction) as missing_order_id,
        count(*) filter (where customer_id is null and not retraction) as missing_customer_id,
        count(*) filter (where sku is null and not retraction) as missing_sku,
        count(*) filter (where quantity is null and problem is null and not retraction) as missing_quantity,
        count(*) filter (where unit_price is null and problem is null and not retraction) as missing_unit_price,
        count(*) filter (where unit_cost is null and problem is null and not retraction) as missing_unit_cost,
        count(*) filter (where event_time is null and not retraction) as missing_event_time,
        count(*) filter (where source_sequence is null and problem is null) as missing_source_sequence,
        count(*) filter (where problem is not null) as invalid_values,
        max(source_sequence) as max_sequence,
        min(line_id || ': ' || problem) filter (where problem is not null) as first_invalid,
        count(*) filter (where partition_date is null or extraction_batch is null) as unnamed,
        min(partition_date) as first_partition,
        max(partition_date) as last_partition,
        min(extraction_batch) as first_batch,
        max(extraction_batch) as last_batch
    from lines
    group by file
)

select * from final
