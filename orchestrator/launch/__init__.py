"""Launching a sweep: the plan (pure: arrays, their chaining, what a relaunch still needs), the ledger (every
cell's attempts, the sweep's lock; its writes happen only here), the run directories and manifest written before
submission, the intent protocol around each sbatch, and `submit.launch`, which ties them together idempotently.
Imports sweep/ and cluster/; baselines/ for the base models that go out with the cells.
"""
