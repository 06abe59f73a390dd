"""Slurm and the local executor: the profile and the values allowed into an sbatch script, sacct/squeue/scancel,
submitit's two backends (the only place submitit is imported), the code snapshot a job runs, and the job entry
points (`jobs.py`: what a training or evaluation job calls on the node). Knows nothing of ledgers or plans beyond
the types it renders; the decisions are launch/'s and watch/'s.
"""
