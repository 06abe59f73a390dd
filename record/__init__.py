"""The bottom layer: what trainer/, eval/ and orchestrator/ all share, importing none of them.

A run's record: the checks its config passes (errors, checks, plain), the keys it logs (metric_keys), its directory
(rundir.RunDir), how a cell reads to a person (display), its identity (identity/) and its MLflow run (tracking/).
docs/architecture.md maps it.
"""
