"""The objective: its settings and their valid choices (settings: the `kl` and `algorithm` sections), the KL
estimators, one registration each (estimators: k1, k2, k3), their placements (kl), advantages and the
policy-gradient loss (advantages), one batch's objective (loss), and the gradient fingerprint a run proves its
settings with. Pure: nothing here imports another folder."""
