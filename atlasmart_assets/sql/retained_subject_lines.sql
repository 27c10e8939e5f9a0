-- For each (day, deletion request) of new_pairs (registered: partition_date, request_id, customer_id, line_id, the
-- keys of each request a publication newly applies to a day or builds it under), whether a stored version of the
-- day other than publication $pub ({store}: a table of the version store, chosen by code) holds a line the request
-- names, by customer or by line id (two joins: DuckDB runs a join on `or` as a nested loop).
select distinct
    stored.partition_date,
    keys.request_id
from {store} as stored
inner join new_pairs as keys
    on stored.partition_date = keys.partition_date and stored.customer_id = cast(keys.customer_id as varchar)
where stored.publication_id <> $pub
union
select distinct
    stored.partition_date,
    keys.request_id
from {store} as stored
inner join new_pairs as keys
    on stored.partition_date = keys.partition_date and stored.line_id = cast(keys.line_id as varchar)
where stored.publication_id <> $pub
