"""A training job's logging, without the training: the project's MlflowTracker, one step every `--pace` seconds,
the step it reached in `--progress` (so a test can break the store mid-run), then flush until delivered and close.

    python -m tests.support.tracking_job RUN_DIR URI RUN_KEY --steps 200 --pace 0.05 --progress FILE

Values depend only on (key, step): two runs of it, one disturbed and one not, must end with equal histories.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from record.tracking.tracker import MlflowTracker

KEYS = ("train/loss", "train/kl_k3", "val/pass_at_1")


def value(key: int, step: int) -> float:
    return round(1.0 / (1 + step) + key, 6)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("uri")
    parser.add_argument("run_key")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--pace", type=float, default=0.05)
    parser.add_argument("--progress", type=Path)
    parser.add_argument("--deliver-within", type=float, default=180, help="seconds to keep flushing at the end")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    tracker = MlflowTracker(args.run_dir, retry_after_s=1.0)
    tracker.open_run(args.run_key, "faults", args.uri, {"kl": {"beta": 0.1}}, {}, parent_run_key="faults-sweep",
                     sweep_id="faults-sweep")
    for step in range(args.steps):
        tracker.log_metrics({k: value(i, step) for i, k in enumerate(KEYS)}, step)
        if args.progress:
            args.progress.write_text(str(step))
        time.sleep(args.pace)
    tracker.set_tags({"phase": "done"})
    deadline = time.monotonic() + args.deliver_within
    while not tracker.flush():  # a job that ends during an outage would leave this to its next open_run
        if time.monotonic() > deadline:
            print(f"undelivered after {args.deliver_within}s: {len(tracker.buffer)} events", file=sys.stderr)
            return 1
        time.sleep(1)
    tracker.close("FINISHED")
    print(f"run_id={tracker.run_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
