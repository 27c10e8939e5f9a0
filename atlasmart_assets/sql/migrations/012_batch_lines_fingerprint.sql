-- What a batch's lines were when they were loaded from its file: a reused batch (its file byte-identical, its lines
-- read back or profiled where they are loaded, not parsed again) is compared against it, so a line changed in
-- raw.order_lines while its file was not is refused even where the day's controls did not move. Batches loaded
-- before this migration have none: each is parsed and loaded again from its file once, which records it.
alter table raw.batches add column lines_fingerprint varchar;
