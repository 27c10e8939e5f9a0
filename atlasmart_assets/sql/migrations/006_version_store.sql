-- The version store: staged and fact rows are kept under the publication that wrote them, and the tables readers
-- know are views of the versions the ledger points at. A publish writes its rows ahead, in short transactions
-- nobody reads, and its commit only adds ledger rows (plus the small mart): a year's correction no longer holds
-- the warehouse while 7 M rows are deleted, copied to history and inserted again.
-- Superseded versions are the same rows, seen through history.* views; retention deletes them.
create schema if not exists versions;

create table versions.staged_order_lines as
select cast(null as varchar) as publication_id, * from staged.order_lines with no data;

create table versions.fct_order_lines as
select cast(null as varchar) as publication_id, * from fact.fct_order_lines with no data;

-- A publish between its first written-ahead row and its commit, and the days it writes. A row here whose run
-- ended without committing is marked abandoned (from then on the publish can neither write nor commit), then its
-- rows are dropped a chunk of days at a time, then the row.
create table audit.pending_versions (
    publication_id varchar primary key,
    run_id varchar not null,
    window_start date not null,
    window_end date not null,
    started_at timestamptz not null default now(),
    abandoned_at timestamptz
);

-- Existing rows: the published ones under the publication the ledger points at; retained history as it is (a
-- copy made ahead of a publish that never committed is the current version already, and is not repeated).
insert into versions.staged_order_lines
select c.publication_id, s.* from staged.order_lines s join audit.current_publications c using (partition_date);
insert into versions.staged_order_lines
select h.* from history.staged_order_lines h
anti join audit.current_publications c using (partition_date, publication_id);

insert into versions.fct_order_lines
select c.publication_id, f.* from fact.fct_order_lines f join audit.current_publications c using (partition_date);
insert into versions.fct_order_lines
select h.* from history.fct_order_lines h
anti join audit.current_publications c using (partition_date, publication_id);

drop table staged.order_lines;
drop table fact.fct_order_lines;
drop table history.staged_order_lines;
drop table history.fct_order_lines;
drop table audit.history_precopies;

create view staged.order_lines as
select v.* exclude (publication_id) from versions.staged_order_lines v
semi join audit.current_publications c using (partition_date, publication_id);

create view fact.fct_order_lines as
select v.* exclude (publication_id) from versions.fct_order_lines v
semi join audit.current_publications c using (partition_date, publication_id);

create view history.staged_order_lines as
select v.* from versions.staged_order_lines v
semi join audit.publications p using (partition_date, publication_id)
anti join audit.current_publications c using (partition_date, publication_id);

create view history.fct_order_lines as
select v.* from versions.fct_order_lines v
semi join audit.publications p using (partition_date, publication_id)
anti join audit.current_publications c using (partition_date, publication_id);
