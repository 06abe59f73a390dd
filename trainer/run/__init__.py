"""A run's life around its steps: checkpoint and resume, preemption, export for evaluation, the collapse verdict,
validation pass@1 and what a run shows while it trains."""
