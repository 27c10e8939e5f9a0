-- Saturation incidents: a current-lane run that missed its queue-wait or duration objective while a backfill ran,
-- recorded against that backfill (seed 004: "record the incident against the backfill so the next one is planned
-- rather than discovered"). One row per backfill, current run and objective missed; the rows found together share
-- incident_id / incident_seq (one alert). Numbered 010: 003-009 are reserved for changes made on the main line.
create sequence if not exists audit.saturation_incident_seq;

create table if not exists audit.saturation_incidents (
    incident_seq bigint not null,
    incident_id varchar not null,
    backfill_id varchar not null,
    backfill_window varchar,
    run_id varchar not null,
    metric varchar not null,
    observed_s double not null,
    objective_s double not null,
    run_status varchar not null,
    detected_at timestamp not null,
    backfill_run_ids varchar not null,
    backfill_runs_in_progress integer not null,
    backfill_lane_limit integer,
    runs_in_progress integer not null,
    max_concurrent_runs integer,
    primary key (backfill_id, run_id, metric)
);
