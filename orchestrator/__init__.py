"""The orchestrator: on the login node a sweep file becomes cells, a plan, Slurm jobs, a ledger, a watcher, then
status and a report; on a compute node, `jobs.py` is what each job runs.

The subpackages follow the data flow, each importing only those before it (tests/unit/test_layers.py `ORDER`):

    claims/ -> cluster/ -> sweep/ -> launch/ -> status/ -> tracking/ -> watch/ -> report/

claims/ is what a sweep is run to test, from a claims file to each row's verdict (pure); cluster/ is Slurm and the
local executor; sweep/ turns a sweep file into cells; launch/ plans, records and submits; status/ reads where every
cell (baseline, watcher) stands; tracking/ is the sweep in MLflow; watch/ follows the sweep and resubmits; report/
draws the paper's tables and figures. Above them: commands/ (one thin module per `orchestrate` command), cli.py (the
login node's entry), jobs.py (the compute node's), and the two helpers every command uses, console.py and
arguments.py. Below them all: record/, trainer/ and eval/.

The base models' evaluations a sweep declares (baselines) pass every stage a cell does, and each stage needs its part
before the next exists, so they have no folder of their own: one would sit both before sweep/ (sweep/expand.py
resolves them with the cells) and after status/ (their rows read status/outcomes.py), and launch/submit.py writes
their ledger. They are one file in each stage instead, named for what it holds: sweep/baselines.py (the declaration,
whose docstring leads to the others), launch/baseline_jobs.py, status/baseline_rows.py, report/base_models.py.
"""
