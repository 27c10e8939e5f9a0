-- A day's evidence is a set of immutable landing batches: raw.batches records each one as first loaded (its
-- sha256 is what every later load must match), raw.order_lines keeps each line with its batch and op, and each
-- publication records the batch set it read and the newest batch's extraction time (as_of).
create table raw.batches (
    partition_date date not null,
    batch_id varchar not null,
    file varchar not null,
    sha256 varchar not null,
    kind varchar not null,
    source_high_sequence bigint not null,
    extracted_at varchar,
    records bigint not null,
    controls varchar not null,
    first_loaded_at timestamp not null,
    first_run_id varchar,
    primary key (partition_date, batch_id)
);

insert into raw.batches
select partition_date, extraction_batch, file, sha256, 'snapshot', source_high_sequence, extracted_at, records, controls,
       first_loaded_at, first_run_id
from raw.manifests;

alter table raw.order_lines add column op varchar;

alter table audit.publications add column input_batches varchar;

alter table audit.publications add column as_of varchar;

alter table audit.publications add column accept_shrink varchar;
