-- The manifest header of each file in $files, as JSON text ($max_object_size: raw_files.read_params).
-- read_json_objects + json_extract: read_json(columns = {manifest: 'json'}) is ~15x slower on large files.
select
    filename as file,
    cast(json_extract(json, '$.manifest') as varchar) as manifest
from read_json_objects(
    $files,
    filename = true,
    format = 'auto',
    maximum_object_size = $max_object_size
)
