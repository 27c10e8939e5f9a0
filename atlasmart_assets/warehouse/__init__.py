"""The warehouse, by job: connections and locking, migrations, scratch, the ledger, publish and rollback, flags.

Only `atlasmart_assets.resources.Warehouse` opens it; these modules take its connections."""
