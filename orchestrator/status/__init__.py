"""Where everything of a launched sweep stands, as status and report read it: each cell (`cells.py`: the ledger
with Slurm's states applied, the facts of its run directory; `outcomes.py`: rows and summaries over seeds, pure),
the baselines (`baseline_rows.py`), the sweep's watcher job (`watcher_info.py`: watcher.json, which the watcher job also
keeps up to date), all of them from one sacct (`current.py`), and the tables printed (`tables.py`). Reads only,
but for watcher.json. Imports cluster/, sweep/ and launch/.
"""
