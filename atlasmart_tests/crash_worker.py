"""A correction run in its own process, so a test can SIGKILL it (ATLASMART_FAILPOINT or a timer)."""

import sys

import dagster as dg

from atlasmart_assets.lab import run_chain

if __name__ == "__main__":
    start, end = sys.argv[1], sys.argv[2]
    result = run_chain(dg.DagsterInstance.ephemeral(), start, end, {"dagster/backfill": "bf-crash"})
    sys.exit(0 if result.success else 1)
