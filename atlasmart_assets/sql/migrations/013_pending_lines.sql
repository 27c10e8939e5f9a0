-- Each day's order lines of a publish that writes ahead, in the order of its window's days: a collection of its rows
-- after its run ended drops them in the chunks they were written in (by ATLASMART_CHUNK_LINES as well as days).
-- Records from before this migration have none, and are dropped by days.
alter table audit.pending_versions add column day_lines bigint[];
