-- Dimension batches (raw/customers.json, raw/customers/<batch_id>.json) and deletion requests
-- (raw/deletions/<request_id>.json) as first loaded: immutable evidence, like landing batches. Each publication
-- records the dimension version it joined and the requests it applied.
create table raw.dimension_batches (
    batch_id varchar primary key,
    file varchar not null,
    sha256 varchar not null,
    customers bigint not null,
    first_loaded_at timestamp not null,
    first_run_id varchar
);

create table raw.deletion_requests (
    request_id varchar primary key,
    file varchar not null,
    sha256 varchar not null,
    requested_at varchar,
    reason varchar,
    customer_id varchar,
    line_ids varchar,
    first_loaded_at timestamp not null,
    first_run_id varchar
);

alter table audit.publications add column dimension_version varchar;

alter table audit.publications add column dimension_batches varchar;

alter table audit.publications add column requests_applied varchar;
