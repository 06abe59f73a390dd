"""Experiment tracking in MLflow, the login node's half: what needs the ledger, the status rows or a process of the
login node's. Why two halves, and MLflow's half: record/tracking/__init__.py; a module here and the one of the same
name there are the two halves of one concept.

- sweep.py: what the sweep's parent run is given once the sweep settles (its status, its summary), and the links
  that open the sweep in the UI; the calls into MLflow are record/tracking/sweep.py's
- store.py: before a submission, whether the jobs' stores answer and whether the jobs would write SQLite from
  compute nodes; a store's schema and probe are record/tracking/store.py's
- buffer.py: `orchestrate tracking flush`: what a sweep's jobs left undelivered (record/tracking/buffer.py), sent
- server.py, postgres.py: `orchestrate tracking up|down|status`, the MLflow server on PostgreSQL (or SQLite)

Imports launch/ and status/; no mlflow import (the server runs as `mlflow server`, a process of its own).
"""
