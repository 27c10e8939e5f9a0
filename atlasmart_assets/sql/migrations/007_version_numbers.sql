-- Each publication's rows in the version store carry a small integer, its version number, beside the publication
-- id. The published views find the current version through (partition_date, version): hashing two fixed-width
-- keys instead of a string per stored row, and row groups of versions numbered outside the current ones are
-- skipped (DuckDB keeps only a prefix of a string in its statistics, and every publication id starts alike).
create sequence if not exists audit.version_seq;

create table audit.version_numbers (
    publication_id varchar primary key,
    version bigint not null unique
);

insert into audit.version_numbers
select publication_id, nextval('audit.version_seq')
from (
    select publication_id from versions.fct_order_lines
    union
    select publication_id from versions.staged_order_lines
);

alter table versions.staged_order_lines add column version bigint;
update versions.staged_order_lines v set version = n.version
from audit.version_numbers n where n.publication_id = v.publication_id;

alter table versions.fct_order_lines add column version bigint;
update versions.fct_order_lines v set version = n.version
from audit.version_numbers n where n.publication_id = v.publication_id;

create or replace view audit.current_versions as
select c.partition_date, n.version
from audit.current_publications c
join audit.version_numbers n using (publication_id);

create or replace view staged.order_lines as
select v.* exclude (publication_id, version) from versions.staged_order_lines v
semi join audit.current_versions c using (partition_date, version);

create or replace view fact.fct_order_lines as
select v.* exclude (publication_id, version) from versions.fct_order_lines v
semi join audit.current_versions c using (partition_date, version);

create or replace view history.staged_order_lines as
select v.* exclude (version) from versions.staged_order_lines v
semi join audit.publications p using (partition_date, publication_id)
anti join audit.current_publications c using (partition_date, publication_id);

create or replace view history.fct_order_lines as
select v.* exclude (version) from versions.fct_order_lines v
semi join audit.publications p using (partition_date, publication_id)
anti join audit.current_publications c using (partition_date, publication_id);
