"""The login node: a sweep file becomes cells, a plan, Slurm jobs, a ledger, a watcher, then status and a report.

The subpackages follow the data flow, each importing only those before it (and record/, trainer/, eval/ below):
sweep/ (file -> cells) -> cluster/ (Slurm, the local executor, what a job runs) -> launch/ (plan, ledger,
submission) -> baselines/ -> watch/ -> status/ -> report/, with tracking/ (MLflow for the sweep) beside them.
commands/ holds one thin module per `orchestrate` command; cli.py dispatches to them.
"""
