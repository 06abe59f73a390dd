"""The run config, one dataclass per section, each checked on construction: the run and most sections (run), the
objective's settings (objective), the memory knobs (memory)."""
