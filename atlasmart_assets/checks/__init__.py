"""Checks on what readers see: the published fact and mart."""
