"""`orchestrate train`'s run in the foreground: its run config read from YAML with dotted overrides (every problem
at once; a sweep file named as such), and its run directory's config.yaml written as a sweep writes it (a run
directory of another config refused, not mixed)."""

from __future__ import annotations

from pathlib import Path

import yaml

from record.errors import ConfigError, UserError
from record.files import atomic_write
from record.identity.run_key import run_key
from record.rundir import RunDir
from trainer.config.run import RunConfig


def load_run_config(path: Path, overrides: list[str]):
    """YAML + dotted overrides -> a validated RunConfig (every problem at once)."""
    from omegaconf import OmegaConf  # noqa: PLC0415 (omegaconf: only with overrides)


    if not path.exists():
        raise UserError(f"{path} does not exist; give a run config YAML (e.g. a run directory's config.yaml)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UserError(f"{path} is not valid YAML: {err}") from None
    if isinstance(data, dict) and "sweep" in data:  # its Hydra defaults list would read as four config problems
        header = data["sweep"] if isinstance(data["sweep"], dict) else {}
        cells = Path(str(header.get("output_root", "runs"))) / str(header.get("name", path.stem))
        raise UserError(f"{path} is a sweep file (it has a `sweep:` section), not a run config: launch it with "
                        f"`orchestrate sweep {path}`, or train one of its cells from the config.yaml that "
                        f"`orchestrate sweep` writes: `orchestrate train {cells}/<run_key>/config.yaml`")
    bad = [o for o in overrides if "=" not in o]
    if bad:
        raise UserError(f"overrides must be key=value, got: {', '.join(bad)}")
    if overrides:
        try:
            merged = OmegaConf.merge(OmegaConf.create(data), OmegaConf.from_dotlist(list(overrides)))
        except Exception as err:  # omegaconf raises many types for a malformed dotlist
            raise UserError(f"cannot apply overrides {overrides}: {err}") from None
        data = OmegaConf.to_container(merged, resolve=True)
    return RunConfig.from_dict(data)


def write_run_config(cfg, key: str, run_dir: Path) -> None:
    """The run directory's config.yaml, as a sweep writes it: without it `orchestrate eval RUN_DIR` (and eval of
    one of its checkpoints) cannot tell what was trained. A run directory of another config is refused, not mixed."""
    path = RunDir(run_dir).config
    if path.exists():
        try:  # read with today's defaults: a config.yaml written before a field was added trains the same
            old = yaml.safe_load(path.read_text(encoding="utf-8"))
            existing = run_key(RunConfig.from_dict(old))
        except (yaml.YAMLError, ConfigError, TypeError, ValueError, AttributeError):
            existing = None
        if existing != key:
            raise UserError(f"{run_dir} holds another run (its config.yaml is run_key {existing}, this config is "
                            f"{key}); give another --run-dir, or train from {path} to resume that run")
        # The same training; what evaluates or machinery may have changed (record/identity/fields.py): the new settings,
        # the tracking of the run as it started.
        data = {**cfg.to_dict(), "tracking": old.get("tracking", {})}
        if data != old:
            atomic_write(path, yaml.safe_dump(data, sort_keys=False))
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    except OSError as err:
        raise UserError(f"cannot write {path}: {err}; give a writable --run-dir") from None
