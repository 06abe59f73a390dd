"""Following a sweep: what to do when a job ends (`watcher.py`: infrastructure failures resubmitted; a
cancellation, a repeated error or a collapsed run never), the sweep's watcher as a Slurm job of its own (`job.py`),
and following from a terminal (`follow.py`). Imports cluster/, launch/, status/ and tracking/ (it closes the
sweep's parent run once every cell is final).
"""
