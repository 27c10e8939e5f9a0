-- A correction commits staged, fact and mart together, so the superseded staged rows are retained too
-- (a rollback restores all three layers).
create table if not exists history.staged_order_lines as
select cast(null as varchar) as publication_id, * from staged.order_lines with no data;
