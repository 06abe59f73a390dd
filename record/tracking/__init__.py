"""Experiment tracking in MLflow, MLflow's half; the login node's half is orchestrator/tracking/.

Why two halves (the one place that says it; orchestrator/tracking/__init__.py and docs/architecture.md point here):
mlflow is imported only under record/ (tests/unit/test_layers.py), so that a job's or a command's import of the
orchestrator never loads it and every call into MLflow sits in one package. The jobs need MLflow (the tracker), and so
does the login node (a sweep's parent run, a report's histories, a store's schema); what the login node *decides*
reads the ledger and the status rows, which live in orchestrator/ and so cannot be imported from here. Hence every
MLflow call and the pure rules they share are here, and each decision that needs the orchestrator is in
orchestrator/tracking/, in the module of the same name: `sweep.py`, `store.py` and `buffer.py` are pairs, one half
in each package.

The job's side:
- tracker.py: `MlflowTracker`, a cell's run (opened by run_key, never duplicated; the sweep's parent found alike)
- buffer.py: `OfflineBuffer`, what could not be delivered, on disk in the run directory, replayed in order
  (its login-node half: orchestrator/tracking/buffer.py delivers what a finished job left)
- null.py: the `Tracker` interface and `NullTracker`, in memory (unit tests, the ranks that do not log)
- key_rules.py: MLflow's rules for keys and values, checked before anything is sent or buffered (pure)
- run_names.py: what the runs carry: their tags, names, `axis/` params, the parent's `sweep/` tags and params, the
  sweep's view of the runs table (pure)
- ui.py: the links to the MLflow UI and what it shows first (pure)
The login node's side (and a preflight probe's):
- sweep.py: the calls on a sweep's runs: the parent closed and given the report, the cells' histories, a cell's
  run retired (its login-node half: orchestrator/tracking/sweep.py decides what the parent is given)
- store.py: a store as a whole: its schema made once, a probe's write and read, a store imported into a server
  (its login-node half: orchestrator/tracking/store.py checks the jobs' stores before a submission)

Adding a field a run carries: run_names.py (and its key follows key_rules.py); a metric: record/metric_keys.py.
"""
