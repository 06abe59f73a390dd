"""Launching a sweep: the plan (`plan.py`, pure: arrays, their chaining, what a relaunch still needs), the ledger
(`ledger.py`: every cell's attempts and the sweep's lock; its writes happen only here), the run directories and
manifest written before submission (`materialise.py`), the intent protocol around each sbatch (`intents.py`), the
ledger brought up to date with Slurm (`reconcile.py`), the base models' evaluations, their ledger and jobs
(`baseline_jobs.py`), and `submit.launch`, which ties them together idempotently. Imports cluster/ and sweep/.
"""
