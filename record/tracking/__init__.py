"""Experiment tracking (mlflow is imported only here). The job's side: the tracker, its on-disk buffer, the null
tracker, MLflow's key rules, the run's names and tags, UI links. The login node's side: the sweep's parent run and
histories (sweep), a local store's schema (store), importing a store (store_import), the preflight probe, retiring a
cell's run."""
