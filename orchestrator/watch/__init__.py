"""Following a sweep: what to do when a job ends (`watcher.py`: infrastructure failures resubmitted, a
cancellation, a repeated error or a collapsed run never), the sweep's watcher as a Slurm job of its own (`job.py`)
with its state in watcher.json (`state.py`), and following from a terminal (`follow.py`). Imports launch/ and
cluster/.
"""
