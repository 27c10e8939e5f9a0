-- Order lines exactly as received, one row per record, for the files in $files. An absent field reads as
-- null (the profile counts it); a value of the wrong type fails the read (raw_files explains which).
with docs as (
    select
        filename,
        manifest,
        lines
    from read_json(
        $files,
        filename = true,
        format = 'auto',
        maximum_object_size = 67108864,
        columns = {
            manifest: 'struct(partition varchar, extraction_batch varchar)',
            lines: 'struct(line_id varchar, order_id varchar, customer_id varchar, sku varchar, quantity bigint, unit_price decimal(18, 2), unit_cost decimal(18, 2), event_time timestamptz, source_sequence bigint)[]'
        }
    )
),

final as (
    select
        docs.filename as file,
        cast(docs.manifest.partition as date) as partition_date,
        docs.manifest.extraction_batch as extraction_batch,
        line.line_id,
        line.order_id,
        line.customer_id,
        line.sku,
        line.quantity,
        line.unit_price,
        line.unit_cost,
        timezone('UTC', line.event_time) as event_time,
        line.source_sequence
    from docs, unnest(docs.lines) as u(line)
)

select * from final
