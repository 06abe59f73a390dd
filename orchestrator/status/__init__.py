"""Each cell as status and report read it: the ledger's records with Slurm's current states applied (one sacct),
the facts of each run directory (`cells.py`), rows and summaries over seeds (`outcomes.py`, pure), the sweep as it
stands with its baselines and watcher (`current.py`) and the tables printed (`tables.py`). Reads only.
"""
