"""Launching a sweep: the plan (`plan.py`, pure: arrays, their chaining, what a relaunch still needs), the ledger
(`ledger.py`: every cell's attempts and the sweep's lock; its writes happen only here), the run directories and
manifest written before submission (`materialise.py`), the intent protocol around each sbatch (`intents.py`), the
ledger brought up to date with Slurm (`reconcile.py`), what a launch would submit now (`relaunch.py`), the base
models' evaluations, their ledger and jobs (`baseline_jobs.py`), and `submit.launch`, which ties them together
idempotently; besides, `orchestrate cancel`'s cancellation (`cancellation.py`) and `orchestrate train`'s run config
and run dir (`foreground.py`). Imports cluster/ and sweep/. The path of `orchestrate sweep` through them:
orchestrator/pipeline/.
"""
