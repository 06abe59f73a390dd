"""One rank of the sharded-reference check: the tiny model's reference as a ZeRO-3 inference engine
(trainer/model/memory_knobs.py) and as a full replica score this rank's rows; prints both as JSON.

    RANK=r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=p python tests/support/reference_ranks.py OUT_DIR
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402

from trainer.config.run import RunConfig  # noqa: E402
from trainer.model import distributed  # noqa: E402
from trainer.model.build import model_path  # noqa: E402
from trainer.model.logprobs import score_logprobs  # noqa: E402
from trainer.model.memory_knobs import build_reference  # noqa: E402
from trainer.train import CACHE  # noqa: E402


def main(out: Path) -> None:
    torch.set_num_threads(1)
    dist = distributed.init(CACHE)
    try:
        cfg = {"model": {"name_or_path": "tiny", "dtype": "fp32"}, "kl": {"placement": "loss", "beta": 0.1}}
        path = model_path(RunConfig.from_dict(cfg))
        scores, kinds = {}, {}
        g = torch.Generator().manual_seed(100 + dist.rank)  # each rank its own rows, as in training
        prompts = [torch.randint(5, 200, (int(n),), generator=g).tolist() for n in (7, 3, 9, 5)]
        responses = [torch.randint(5, 200, (int(n),), generator=g).tolist() for n in (4, 8, 1, 6)]
        for place in ("zero3", "replica"):
            run = RunConfig.from_dict({**cfg, "memory": {"reference": place}})
            ref = build_reference(run, path, dist, torch.float32)
            kinds[place] = type(ref).__name__
            if place == "zero3":  # what this rank holds of the weights, and the whole
                params = list(ref.module.parameters())
                kinds["held"] = [sum(p.ds_tensor.numel() for p in params), sum(p.ds_numel for p in params)]
            # Two rows at a time: every rank makes the same number of forwards (ZeRO-3 gathers are collective).
            scores[place] = score_logprobs(ref, prompts, responses, 0, 2, 1.0, chunk_tokens=5).tolist()
        (out / f"rank{dist.rank}.json").write_text(json.dumps({"world": dist.world_size, "kinds": kinds,
                                                               "scores": scores}))
    finally:
        distributed.teardown()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
