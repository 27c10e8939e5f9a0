-- Versions copied into history.* ahead of the publish that supersedes them, in their own short transaction, so the
-- commit's lock hold does not include the copy. A row here means "history already holds this version": the commit
-- then skips the copy and deletes the row; a row left by a publish that never committed is reused by the next one.
create table if not exists audit.history_precopies (
    partition_date date not null,
    publication_id varchar not null,
    run_id varchar not null,
    copied_at timestamptz not null default now(),
    primary key (partition_date, publication_id)
);
