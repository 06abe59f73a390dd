"""The bottom layer: what trainer/, eval/ and orchestrator/ all share, importing none of them.

A run's record: the checks its config passes (errors, checks, plain), the keys it logs (keys), its directory
(rundir.RunDir), its identity (identity), and its MLflow run (tracker*, run_names). docs/architecture.md maps it.
"""
