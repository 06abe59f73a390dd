"""Time the expansion of a synthetic 10,000-cell sweep (target: under 2 s on one core).

    .venv/bin/python bench/sweep_expand.py [--cells-only]

The sweep composes the shipped config groups (sweeps/conf) and varies 2 estimators x 2 placements x 25 betas
x 10 learning rates x 10 seeds = 10,000 cells. It is timed twice: with RLOO, and with Dr. GRPO, whose
`algorithm.norm_length: ${rollout.max_response_tokens}` makes every cell resolve an interpolation. The time
covers everything `orchestrate validate` does after Python starts: Hydra composition, expansion, the
validation of every cell's RunConfig, the run_keys and the plan. Prints one line per variant.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.launch.plan import make_plan  # noqa: E402
from orchestrator.sweep.expand import load_sweep  # noqa: E402

TARGET_S = 2.0
BETAS = ",".join(f"{0.01 * (i + 1):.2f}" for i in range(25))
LRS = ",".join(f"{(i + 1)}e-7" for i in range(10))
SWEEP = """
defaults:
  - base
  - model: tiny
  - data: tiny
  - algorithm: {algorithm}
  - _self_
rollout: {{engine: hf, max_response_tokens: 16, max_prompt_tokens: 64}}
sweep:
  name: bench-{algorithm}
  seeds: range(0,10)
  axes:
    kl.estimator: k1,k3
    kl.placement: reward,loss
    kl.beta: "{betas}"
    optim.lr: "{lrs}"
  slurm: {{profile: local}}
"""


def time_one(algorithm: str, folder: Path) -> tuple[int, float]:
    path = folder / f"bench-{algorithm}.yaml"
    path.write_text(SWEEP.format(algorithm=algorithm, betas=BETAS, lrs=LRS))
    start = time.perf_counter()
    sweep = load_sweep(path)
    make_plan(sweep)
    return len(sweep.cells), time.perf_counter() - start


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        for algorithm in ("rloo", "dr_grpo"):
            cells, seconds = time_one(algorithm, Path(tmp))
            print(f"{algorithm:8s} {cells} cells expanded and validated in {seconds:.2f} s "
                  f"({seconds / TARGET_S:.2f} x the {TARGET_S:g} s target; {1e6 * seconds / cells:.0f} us/cell)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
