-- The manifest header of each file in $files, as JSON text.
select
    filename as file,
    cast(manifest as varchar) as manifest
from read_json(
    $files,
    filename = true,
    format = 'auto',
    maximum_object_size = 1073741824,
    columns = {manifest: 'json'}
)
