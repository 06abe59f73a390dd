"""Three ZeRO-3 steps on the tiny model in a fresh process; prints the final weights as JSON.

    python tests/support/zero3_steps.py plain|deepspeed-defaults|ours
A separate process per setting, because DeepSpeed's memory-efficient linear patches F.linear process-wide.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import torch  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def main(mode: str, model_dir: str) -> None:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ids = torch.randint(5, 200, (4, 20))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if mode == "plain":
        for _ in range(3):
            loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        weights = model.state_dict()
    else:
        import deepspeed

        from trainer.model import distributed
        from trainer.train import CACHE

        distributed.init(CACHE)
        ours = mode == "ours"
        if ours:
            distributed.hook_whole_layers(model)
        config = distributed.deepspeed_config(bf16=False, grad_clip=None, micro_batches=1,
                                              memory_efficient_linear=not ours)
        engine, *_ = deepspeed.initialize(model=model, optimizer=opt, config=config)
        for _ in range(3):
            engine.backward(engine(input_ids=ids, labels=ids).loss)
            engine.step()
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters())):
            weights = {k: v.clone() for k, v in engine.module.state_dict().items()}
        distributed.teardown()
    print(json.dumps({k: v.flatten().tolist() for k, v in weights.items()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
