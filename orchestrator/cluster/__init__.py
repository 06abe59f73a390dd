"""Slurm and the local executor: the profile (`profile.py`, with its vLLM shares of a GPU, `profile_shares.py`) and
the values allowed into an sbatch script (`sbatch_values.py`), sacct/squeue/scancel (`query.py`), submitit's two
backends and the sbatch script of an array (`executor.py`; with `arrays.py`, one pickle per array, the only modules
that import submitit), the code snapshot a job runs (`snapshot.py`) and how a job calls its entry (`entry.py`).
First in the flow: it imports nothing else of the orchestrator (the plan and the sweep it renders are types only);
what to submit and when is launch/'s and watch/'s to decide.
"""
