"""Slack alerts: failed checks, failed runs, and the backfill lifecycle (started / published / failed / rolled back)."""
