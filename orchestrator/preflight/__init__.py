"""`orchestrate preflight`: what a sweep's submission would meet on the cluster, checked before anything goes out.
So far: Slurm's own verdict (`sbatch --test-only`) on each array the plan submits and on the watcher job
(testonly.py); the probe jobs on the compute nodes (issue 31 item 1b) are not written yet."""
