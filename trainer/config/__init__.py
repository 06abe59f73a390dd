"""The run config, one dataclass per section, each checked on construction: the run and most sections (run), the
memory knobs (memory). The objective's two sections (`kl`, `algorithm`) live beside its math, in
trainer/objective/settings.py: adding an estimator or a placement is one folder's change."""
