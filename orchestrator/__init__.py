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
"""
