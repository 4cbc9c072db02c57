"""controllers: compute and storage controllers with simulated replicas, fed
deterministic commands derived from the catalog and ephemeral commands gated by
`catalog_ts` (seed 001).

Not built yet: see the controllers issue.
"""
