"""The objective's math, pure: the KL estimators and their placements (kl), advantages and the policy-gradient loss
(advantages), one batch's objective (loss), and the gradient fingerprint a run proves its settings with."""
