"""Assets by layer: raw, staged, fact + mart (published together)."""
