-- The order lines a publish that writes ahead writes of each day (0 for a day it points at), in the order of its
-- window's days: a collection of its rows after its run ended drops them by ATLASMART_CHUNK_LINES as well as by days.
-- Records from before this migration have none, and are dropped by days.
alter table audit.pending_versions add column day_lines bigint[];
