-- A version of a day whose staged lines equal the current version's is not stored again: the publication's ledger
-- row points at the rows already stored (a year re-published on unchanged evidence wrote 7.3 M identical rows, and
-- each such re-run grew the store by a year until retention caught up). audit.day_versions records, for each
-- ledger row from this migration on, the publication whose stored rows it reads (stored_as: itself, or the
-- earlier publication that wrote the same lines) and its staged lines' fingerprint, which the next publish
-- compares. A ledger row without one (written before) reads its own rows, as before. Retention sets stored_as to
-- null when it drops a version: its rows may stay (a kept version reads them), but it reads none from then on.
create table audit.day_versions (
    partition_date date not null,
    publication_id varchar not null,
    stored_as varchar,
    fingerprint varchar,
    primary key (partition_date, publication_id)
);

-- Every ledger row and the version number its rows are stored under.
create view audit.ledger_versions as
select
    p.partition_date,
    p.publication_id,
    n.version
from audit.publications as p
left join audit.day_versions as d using (partition_date, publication_id)
join audit.version_numbers as n
    on n.publication_id = case when d.publication_id is null then p.publication_id else d.stored_as end;

create or replace view audit.current_versions as
select
    c.partition_date,
    l.version
from audit.current_publications as c
join audit.ledger_versions as l using (partition_date, publication_id);

-- A superseded version is read through its own ledger row, under its own publication id, wherever it is stored.
create or replace view history.staged_order_lines as
select
    h.publication_id,
    v.* exclude (publication_id, version)
from versions.staged_order_lines as v
join (
    select * from audit.ledger_versions
    anti join audit.current_publications using (partition_date, publication_id)
) as h using (partition_date, version);

create or replace view history.fct_order_lines as
select
    h.publication_id,
    v.* exclude (publication_id, version)
from versions.fct_order_lines as v
join (
    select * from audit.ledger_versions
    anti join audit.current_publications using (partition_date, publication_id)
) as h using (partition_date, version);
