-- The deletion requests that named a record of the day's evidence (winning or not) when its version was built, as a
-- JSON list of request ids. A later correction keeps the day as published while exactly these requests name its
-- evidence (its landing batches unchanged): each was in force for the build, which applied it to whatever it names.
-- requests_applied cannot say that: it lists the requests credited with a suppressed line, one per line, so a
-- request naming only a retracted record, or a second request for a subject another request already took out,
-- is never in it, and such a day was built again by every correction. A version without one (written before)
-- is compared by its requests_applied, as before.
alter table audit.day_versions add column requests_named varchar;
