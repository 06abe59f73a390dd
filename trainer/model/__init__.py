"""The models of a run: building the policy and the frozen reference (build, memory), per-token log-probs,
process groups and DeepSpeed (distributed, build_lock), where weights come from (source, cache_lock, tiny_model)."""
