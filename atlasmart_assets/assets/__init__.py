"""Assets by layer: raw evidence, and the correction (staged + fact + mart, published together)."""
