-- The SCD2 customer dimension from $file: one row per customer version, valid_from inclusive, valid_to exclusive.
with versions as (
    select unnest(customers, recursive := true)
    from read_json($file, format = 'auto', maximum_object_size = 67108864)
),

final as (
    select
        customer_id,
        country,
        tier,
        cast(valid_from as timestamp) as valid_from,
        cast(valid_to as timestamp) as valid_to
    from versions
)

select * from final
