"""The sweep's launch path, one stop a module, in the order `orchestrate sweep` passes them (path.py holds the
whole path on one screen): the request checked and what a launch would submit decided, nothing written
(`planning.py`); what stops a submission, one list the dry run reports and the submission refuses on
(`stops.py`); the dry run's printing (`dry_run.py`); the run dirs written, the jobs submitted and the sweep
followed (`submission.py`). Above every other subpackage: it imports cluster/, sweep/, launch/, preflight/,
tracking/ and watch/, and only commands/ import it.
"""
