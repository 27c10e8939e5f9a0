-- Order lines exactly as received, one row per record, for the files in $files.
with docs as (
    select
        filename,
        manifest,
        lines
    from read_json(
        $files,
        filename = true,
        format = 'auto',
        maximum_object_size = 1073741824,
        columns = {
            manifest: 'struct(partition varchar, schema_version integer, extraction_batch varchar)',
            lines: 'struct(line_id varchar, order_id varchar, customer_id varchar, sku varchar, quantity varchar, unit_price varchar, unit_cost varchar, event_time varchar, source_sequence varchar)[]'
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
        try_cast(line.quantity as bigint) as quantity,
        try_cast(line.unit_price as decimal(18, 2)) as unit_price,
        try_cast(line.unit_cost as decimal(18, 2)) as unit_cost,
        timezone('UTC', try_cast(line.event_time as timestamptz)) as event_time,
        try_cast(line.source_sequence as bigint) as source_sequence,
        line.quantity as quantity_text,
        line.unit_price as unit_price_text,
        line.unit_cost as unit_cost_text,
        line.event_time as event_time_text,
        line.source_sequence as source_sequence_text
    from docs, unnest(docs.lines) as u(line)
)

select * from final
