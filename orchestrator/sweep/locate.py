"""Where a launched sweep lives: the sweep directory (<output_root>/<name>) of a sweep file, or the directory itself,
checked. What every command that reads a launched sweep (status, report, watch, cancel) starts from.
"""

from __future__ import annotations

from pathlib import Path

from record.errors import UserError


def sweep_dir_of(sweep: str, overrides: list[str] | None = None) -> Path:
    """The sweep directory of a sweep file (output_root/name) or the directory itself."""
    path = Path(sweep)
    if not path.exists() and path.suffix not in (".yaml", ".yml"):
        # A missing directory, not a malformed sweep file: say so, with the sweeps that are there.
        near = sorted(p.name for p in path.parent.iterdir() if (p / "ledger").is_dir()) if path.parent.is_dir() else []
        hint = f"; sweeps in {path.parent}: {', '.join(near)}" if near else ""
        raise UserError(f"{path}: no such sweep directory{hint}; give the sweep file (sweeps/x.yaml) or "
                        f"<output_root>/<sweep name> of a launched sweep")
    if path.is_dir():
        if not (path / "ledger").is_dir() and not (path / "manifest.json").exists():
            raise UserError(f"{path}: not a sweep directory (no ledger/ or manifest.json); give the sweep file or "
                            f"<output_root>/<sweep name>")
        return path.absolute()
    from orchestrator.sweep.expand import load_sweep  # noqa: PLC0415 (Hydra: only for a sweep file, not a directory)

    loaded = load_sweep(path, overrides or [])
    return (Path(loaded.spec.output_root) / loaded.name).absolute()
