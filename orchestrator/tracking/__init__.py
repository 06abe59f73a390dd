"""MLflow for a sweep, from the login node: the sweep's parent run, its summary and its UI links (`sweep_run.py`),
the check that the jobs' stores answer (`check.py`), and `orchestrate tracking`'s server on PostgreSQL (`server.py`,
`postgres.py`). mlflow itself is imported only under record/ (record/tracker*.py). Imports launch/ and status/.
"""
