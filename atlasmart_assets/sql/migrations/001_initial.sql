-- The schema of the first release (raw, staged, fact, mart, the ledger, retained history).
create schema if not exists raw;
create schema if not exists staged;
create schema if not exists fact;
create schema if not exists mart;
create schema if not exists audit;
create schema if not exists history;

create table raw.order_lines (
    partition_date date not null,
    line_id varchar,
    order_id varchar,
    customer_id varchar,
    sku varchar,
    quantity bigint,
    unit_price decimal(18, 2),
    unit_cost decimal(18, 2),
    event_time timestamp,
    source_sequence bigint,
    extraction_batch varchar
);

create table raw.manifests (
    partition_date date primary key,
    file varchar not null,
    sha256 varchar not null,
    source varchar,
    schema_version integer,
    extraction_batch varchar,
    extracted_at varchar,
    source_high_sequence bigint,
    records bigint,
    controls varchar,
    first_loaded_at timestamp not null,
    first_run_id varchar
);

create table staged.order_lines (
    partition_date date not null,
    line_id varchar not null,
    order_id varchar not null,
    customer_id varchar not null,
    country varchar not null,
    tier varchar not null,
    sku varchar not null,
    quantity bigint not null,
    unit_price decimal(18, 2) not null,
    unit_cost decimal(18, 2) not null,
    order_time timestamp not null,
    event_time timestamp not null,
    source_sequence bigint not null
);

create table fact.fct_order_lines (
    partition_date date not null,
    line_id varchar not null,
    order_id varchar not null,
    customer_id varchar not null,
    country varchar not null,
    tier varchar not null,
    sku varchar not null,
    quantity bigint not null,
    unit_price decimal(18, 2) not null,
    unit_cost decimal(18, 2) not null,
    gmv decimal(18, 2) not null,
    cost decimal(18, 2) not null,
    gross_profit decimal(18, 2) not null,
    event_time timestamp not null,
    source_sequence bigint not null
);

create table mart.revenue_daily (
    partition_date date not null,
    country varchar not null,
    tier varchar not null,
    lines bigint not null,
    orders bigint not null,
    units bigint not null,
    gmv decimal(18, 2) not null,
    cost decimal(18, 2) not null,
    gross_profit decimal(18, 2) not null
);

create sequence audit.publication_seq;

create table audit.publications (
    seq bigint not null,
    publication_id varchar not null,
    partition_date date not null,
    kind varchar not null,
    published_at timestamp not null,
    run_id varchar,
    backfill_id varchar,
    reason varchar,
    fence_override varchar,
    code_version varchar,
    input_sha256 varchar,
    source_high_sequence bigint,
    prev_publication_id varchar,
    restored_from varchar,
    rows_before bigint,
    rows_after bigint,
    controls_before varchar,
    controls_after varchar,
    sha256_before varchar,
    sha256_after varchar,
    changed boolean not null,
    extract_json varchar not null,
    primary key (publication_id, partition_date)
);

create or replace view audit.current_publications as
select *
from audit.publications
qualify row_number() over (partition by partition_date order by seq desc) = 1;

create table audit.corrections_in_progress (
    partition_date date primary key,
    backfill_id varchar,
    run_id varchar not null,
    reason varchar,
    since timestamp not null
);

create table history.fct_order_lines as
select cast(null as varchar) as publication_id, * from fact.fct_order_lines with no data;

create table history.revenue_daily as
select cast(null as varchar) as publication_id, * from mart.revenue_daily with no data;

create or replace view mart.revenue_daily_v as
select
    m.*,
    c.partition_date is not null as correction_in_progress,
    c.backfill_id as correction_backfill_id,
    c.since as correction_since
from mart.revenue_daily as m
left join audit.corrections_in_progress as c using (partition_date);
