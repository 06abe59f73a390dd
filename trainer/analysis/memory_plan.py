"""The memory plan of one training cell: estimated peak bytes per GPU, term by term, before anything is submitted.
Pure arithmetic on the run config and the model's published shape (trainer/analysis/model_shapes.py); `orchestrate
validate` and the sweep's dry run print it.

Terms (per GPU, N = training ranks; P parameters; bf16 training):
    model states   ZeRO-3 shards: bf16 params 2, fp32 master 4, Adam m and v 8, fp32 gradient partition 4 bytes a
                   parameter, / N, plus the largest module gathered whole (4 bytes a parameter): DeepSpeed's own
                   estimator's terms (estimate_zero3_model_states_mem_needs; tests/unit/test_memory_plan.py)
    reference      bf16, / N under ZeRO-3 (memory.reference zero3), whole as a replica, 0 where skipped
    activations    tokens x layers x per-layer elements x 2 bytes; per token and layer a decoder keeps
                   8 d + 4 I + 2 kv + heads + 2 elements (d hidden, I intermediate, kv the K/V width), measured on
                   CPU with saved_tensors_hooks on the published shapes (test_memory_plan.py, within 2%); with
                   checkpointing, one layer input (d) a layer, plus one layer recomputed in full
    logits         the response positions' logits in bf16 (kept for the chunked log-softmax's backward) plus one
                   chunk's fp32 working set (3 copies of chunk x vocab)
    vLLM           gpu_memory_utilization x GPU memory while awake; it sleeps (CUDA) while the policy trains, so the
                   peak is the larger of training (states + reference + activations + logits) and rollout (states +
                   reference + vLLM)
Estimates, not measurements: no GPU has run this project (docs/trainer.md, "Memory").
"""

from __future__ import annotations

from dataclasses import dataclass

from trainer.analysis.model_shapes import Shape, shape_of
from trainer.config.run import RunConfig

GB = 1e9
STATE_BYTES = 2 + 4 + 8 + 4  # bf16 params, fp32 master, Adam m and v, fp32 gradient partition
CUDA_CONTEXT_GB = 1.0        # CUDA context and NCCL buffers, per GPU: a round allowance


def layer_elements_per_token(shape: Shape) -> int:
    """Elements one decoder layer keeps for backward per token, without checkpointing (measured formula)."""
    return 8 * shape.hidden + 4 * shape.intermediate + 2 * shape.kv_heads * shape.dim_head + shape.heads + 2


@dataclass(frozen=True)
class MemoryPlan:
    """Estimated GB per GPU of each term, the peak, and what to turn when it does not fit."""

    model: str
    ranks: int
    terms: dict[str, float]
    train_peak_gb: float
    rollout_peak_gb: float
    gpu_mem_gb: float | None
    checkpointing: bool = False

    @property
    def peak_gb(self) -> float:
        return max(self.train_peak_gb, self.rollout_peak_gb)

    @property
    def fits(self) -> bool:
        return self.gpu_mem_gb is None or self.peak_gb <= self.gpu_mem_gb

    def lines(self) -> list[str]:
        terms = ", ".join(f"{k} {v:.1f}" for k, v in self.terms.items())
        limit = f" of {self.gpu_mem_gb:g} GB" if self.gpu_mem_gb else " (the profile states no gpu_mem_gb: not checked)"
        return [f"memory {self.model} on {self.ranks} GPU(s), GB per GPU (estimated): {terms}",
                f"  peak {self.peak_gb:.1f}{limit} (training {self.train_peak_gb:.1f}, "
                f"rollout {self.rollout_peak_gb:.1f})"]

    def problem(self) -> str | None:
        """One line naming the knob to turn, when the plan does not fit."""
        if self.fits:
            return None
        act = max(("activations", "logits", "reference", "vllm"), key=lambda k: self.terms.get(k, 0.0))
        fix = {"activations": ("lower memory.micro_batch_tokens (a micro-batch is whole prompt groups)"
                               if self.checkpointing else
                               "set memory.gradient_checkpointing=true or lower memory.micro_batch_tokens"),
               "logits": "lower memory.micro_batch_tokens or memory.logprob_chunk_tokens",
               "reference": "set memory.reference=zero3",
               "vllm": "lower rollout.gpu_memory_utilization"}[act]
        return (f"memory: {self.model} needs ~{self.peak_gb:.0f} GB per GPU, the GPU has {self.gpu_mem_gb:g}; "
                f"the largest term is {act} ({self.terms[act]:.0f} GB): {fix}")


def plan(cfg: RunConfig, ranks: int, gpu_mem_gb: float | None, gpu: bool = True) -> MemoryPlan | None:
    """The plan of `cfg` trained on `ranks` GPUs; None for a model whose shape is not known."""
    shape = shape_of(cfg.model.name_or_path)
    if shape is None or ranks < 1:
        return None
    P, n, m = shape.params, ranks, cfg.memory
    r, G = cfg.rollout, cfg.algorithm.group_size
    local_groups = max(1, cfg.optim.batch_prompts // n // cfg.optim.updates_per_batch)
    seq = r.max_prompt_tokens + r.max_response_tokens
    groups = m.micro_groups(4, G, seq, local_groups)
    tokens, responses = groups * G * seq, groups * G * (r.max_response_tokens + 1)
    per_layer = layer_elements_per_token(shape) * 2  # bf16 bytes
    if m.checkpointing(P / 1e9):
        activations = tokens * (shape.layers * shape.hidden * 2 + per_layer)
    else:
        activations = tokens * shape.layers * per_layer
    logits = responses * shape.vocab * 2 + 3 * min(m.logprob_chunk_tokens, responses) * shape.vocab * 4
    uses_ref = (cfg.kl.placement != "none" and cfg.kl.beta > 0) or not m.skip_unused_reference
    reference = 0.0 if not uses_ref else 2 * P / (n if m.reference_place(gpu) == "zero3" else 1)
    vllm = r.gpu_memory_utilization * gpu_mem_gb * GB if (gpu_mem_gb and r.engine == "vllm") else 0.0
    states = STATE_BYTES * P / n + 4 * shape.largest_layer_params
    terms = {"states": states / GB, "reference": reference / GB, "activations": activations / GB,
             "logits": logits / GB, "vllm": vllm / GB, "cuda": CUDA_CONTEXT_GB}
    base = terms["states"] + terms["reference"] + terms["cuda"]
    return MemoryPlan(cfg.model.name_or_path, n, terms, base + terms["activations"] + terms["logits"],
                      base + terms["vllm"], gpu_mem_gb, m.checkpointing(P / 1e9))



# --- the evaluation job: one trained model's bf16 export under vLLM (or HF) on one GPU ------------------------------
EVAL_HOST_ALLOWANCE_GB = 8.0   # Python, lm-eval, the tokenizer, vLLM's engine process, pinned buffers: round
EVAL_GPU_SHARE = 0.85          # vLLM's gpu_memory_utilization in the evaluation (eval/backends.py)
EVAL_GPU_OVERHEAD_GB = 3.0     # CUDA context, CUDA graphs and the sampler's activations: a round figure


@dataclass(frozen=True)
class EvalPlan:
    """Estimated host and GPU memory of the evaluation job of one model, against the profile's."""

    model: str
    host_gb: float          # the bf16 export read once (2 B a parameter) + one fp32 tensor + the allowance
    weights_gb: float       # the bf16 weights on the GPU
    kv_tokens: int          # tokens of KV cache left in vLLM's share of the GPU
    seq_tokens: int         # one sample: the prompt allowance + eval.max_tokens
    host_mem_gb: float      # what the profile's eval job asks for
    gpu_mem_gb: float | None

    def lines(self) -> list[str]:
        gpu = (f"GPU {self.weights_gb:.1f} weights + KV cache for {self.kv_tokens:,} tokens "
               f"({self.kv_tokens // max(self.seq_tokens, 1)} samples of {self.seq_tokens:,})"
               if self.gpu_mem_gb else "GPU not checked (no gpu_mem_gb)")
        return [f"evaluation {self.model} (estimated): host {self.host_gb:.1f} of {self.host_mem_gb:g} GB, {gpu}"]

    def problem(self) -> str | None:
        """Checked on a profile that states gpu_mem_gb (a GPU cluster): a CPU profile's evaluation is a smoke test."""
        if not self.gpu_mem_gb:
            return None
        if self.host_gb > self.host_mem_gb:
            return (f"evaluation memory: {self.model} needs ~{self.host_gb:.0f} GB of host memory, the profile's "
                    f"eval job asks for {self.host_mem_gb:g}: raise eval.mem_gb in the Slurm profile")
        if self.kv_tokens < self.seq_tokens:
            return (f"evaluation memory: {self.model}'s bf16 weights ({self.weights_gb:.0f} GB) leave no room for one "
                    f"sample's KV cache in {EVAL_GPU_SHARE:g} of a {self.gpu_mem_gb:g} GB GPU: give the evaluation "
                    f"a larger GPU or lower eval.max_tokens")
        return None


def eval_plan(cfg: RunConfig, host_mem_gb: float, gpu_mem_gb: float | None) -> EvalPlan | None:
    """The evaluation job's memory for `cfg`'s model; None for a model whose shape is not known."""
    shape = shape_of(cfg.model.name_or_path)
    if shape is None:
        return None
    weights = 2 * shape.params / GB
    host = weights + 4 * shape.largest_layer_params / GB + EVAL_HOST_ALLOWANCE_GB
    seq = cfg.rollout.max_prompt_tokens + cfg.eval.max_tokens
    free = (EVAL_GPU_SHARE * gpu_mem_gb - weights - EVAL_GPU_OVERHEAD_GB) * GB if gpu_mem_gb else 0.0
    return EvalPlan(cfg.model.name_or_path, host, weights, max(0, int(free // shape.kv_bytes_per_token())), seq,
                    host_mem_gb, gpu_mem_gb)

# --- the time-limit margin: how long the warning must come before the limit (slurm/profiles/a100.yaml) -------------
CHECKPOINT_BYTES = 4 + 4 + 4   # a ZeRO-3 checkpoint: fp32 master weights, Adam m and v a parameter (bf16 params: KBs)
WRITE_GB_S_PER_NODE = 0.5      # a shared filesystem under an array's load, per node: a cautious round figure
# The step in flight when the warning comes runs to its update's end: the paper's step, estimated (not measured):
# 1,280 rollouts of up to 1,024 tokens on 8 A100s (vLLM, ~60-120 s) and the update, 6 x 7.6e9 x 1.6M tokens x 4/3
# (checkpointing) / 8 GPUs at 40% of 312 TFLOP/s (~100 s), the reference forward (~20 s): 300 s, rounded up.
STEP_IN_FLIGHT_S = 300


def checkpoint_gb(shape: Shape) -> float:
    return CHECKPOINT_BYTES * shape.params / GB


def save_seconds(shape: Shape, nodes: int, write_gb_s: float = WRITE_GB_S_PER_NODE) -> float:
    """Estimated seconds to write one checkpoint: each node writes its ranks' shards at `write_gb_s`."""
    return checkpoint_gb(shape) / max(nodes, 1) / write_gb_s
