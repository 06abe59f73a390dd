"""The task YAMLs: rendering (absolute data paths, k repeats, sampling), and every task run end to end through
lm-eval's real TaskManager and simple_evaluate with a scripted LM, so the mean@k arithmetic is checked exactly."""

from __future__ import annotations

import ast
import importlib.util
from collections import Counter
from pathlib import Path

import pytest
from lm_eval.api.model import LM

from eval import backends, local_data, taskfiles
from eval.answers import GRADERS
from eval.mean_at_k import pass_at_k
from tests.fixtures.eval_data import prepare_fixture_data
from trainer.tasks.common import read_jsonl

K = 4
GEN = backends.generation_kwargs("hf", 1.0, 1.0, 64, ["<|end|>"])


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    return prepare_fixture_data(tmp_path_factory.mktemp("data"))


def test_every_task_reads_a_prepared_dataset_and_has_a_grader():
    tasks = taskfiles.available_tasks()
    assert set(tasks) == {"math500", "math_squared", "math_test", "mmlu_college_physics", "mmlu_college_chemistry",
                          "mmlu_college_biology", "countdown", "tiny", "tiny_ood", "small_sums"}
    files = {local_data.SPECS[n].file for n in local_data.SPECS}
    for task in tasks:
        assert taskfiles.data_file(task) in files, task
        assert taskfiles.family(task) in GRADERS, task


def test_the_paper_tasks_and_the_config_agree():
    """The config's choices are eval/tasks/ itself (a task is added there alone), the paper's five among them."""
    from trainer.config.run import EVAL_TASKS, PAPER_EVAL_TASKS

    assert list(EVAL_TASKS) == taskfiles.available_tasks() and len(EVAL_TASKS) >= 9
    assert set(PAPER_EVAL_TASKS) < set(EVAL_TASKS) and "math500" in PAPER_EVAL_TASKS


def test_rendering_makes_data_paths_absolute_and_sets_k_and_sampling(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = taskfiles.render_task("math500", Path("relative/math500.jsonl"), 7, GEN)
    path = Path(cfg["dataset_kwargs"]["data_files"]["test"])
    assert path.is_absolute() and path == tmp_path / "relative" / "math500.jsonl"
    assert cfg["repeats"] == 7
    assert cfg["generation_kwargs"] == GEN
    assert "include" not in cfg and cfg["output_type"] == "generate_until"
    assert cfg["filter_list"] == [{"name": "all", "filter": [{"function": "custom", "filter_fn": "utils.keep_all"}]}]
    assert cfg["process_results"] == "utils.process_math" and isinstance(cfg["process_results"],
                                                                        taskfiles.FunctionRef)
    with pytest.raises(ValueError, match="k=0"):
        taskfiles.render_task("math500", path, 0, GEN)
    with pytest.raises(KeyError, match="unknown eval task 'gsm8k'; valid: countdown, math500"):
        taskfiles.load_task("gsm8k")


def test_a_rendered_file_is_what_lm_eval_loads(prepared, tmp_path):
    from lm_eval.tasks._yaml_loader import load_yaml

    out = taskfiles.render({"mmlu_college_physics": prepared / "mmlu_college_physics.jsonl"}, tmp_path, K, GEN)
    cfg = load_yaml(out / "mmlu_college_physics.yaml")
    assert callable(cfg["process_results"]) and callable(cfg["doc_to_text"])
    assert cfg["dataset_kwargs"]["data_files"]["test"] == str(prepared / "mmlu_college_physics.jsonl")
    doc = read_jsonl(prepared / "mmlu_college_physics.jsonl")[0]
    prompt = cfg["doc_to_text"](doc)
    assert prompt.startswith(doc["question"]) and "(D) increasing" in prompt
    assert prompt.endswith("Answer with the letter of the correct option. Let's think step by step and output the "
                           "final answer within \\boxed{}.")


def test_sampling_is_explicit_for_each_backend():
    hf = backends.generation_kwargs("hf", 1.0, 1.0, 4096, ["<|im_end|>"])
    vllm = backends.generation_kwargs("vllm", 1.0, 1.0, 4096, ["<|im_end|>"])
    assert hf["top_k"] == 0 and vllm["top_k"] == -1 and vllm["min_p"] == 0.0
    for kwargs in (hf, vllm):
        assert kwargs["do_sample"] is True and kwargs["temperature"] == 1.0 and kwargs["top_p"] == 1.0
        assert kwargs["max_gen_toks"] == 4096 and kwargs["repetition_penalty"] == 1.0
        assert "seed" not in kwargs  # a per-request seed would make the k clones identical
    assert backends.generation_kwargs("hf", 0.0, 1.0, 8, ["x"]) == {"until": ["x"], "max_gen_toks": 8,
                                                                      "do_sample": False, "temperature": 0.0}
    with pytest.raises(ValueError, match="no stop strings"):
        backends.generation_kwargs("hf", 1.0, 1.0, 8, [])


class _Tokenizer:
    def __init__(self, eos, vocab):
        self.eos_token, self._vocab = eos, vocab

    def get_vocab(self):
        return {t: i for i, t in enumerate(self._vocab)}


def test_stop_strings_follow_the_tokenizer_and_the_template():
    qwen = _Tokenizer("<|endoftext|>", ["a", "<|im_end|>", "<|endoftext|>", "<|im_start|>"])
    assert backends.stop_strings(qwen, chat_template=True) == ["<|endoftext|>", "<|im_end|>"]
    assert backends.stop_strings(qwen, chat_template=False)[-3:] == list(backends.PLAIN_STOPS)
    llama = _Tokenizer("<|eot_id|>", ["<|eot_id|>", "<|end_of_text|>"])
    assert backends.stop_strings(llama, chat_template=True) == ["<|eot_id|>", "<|end_of_text|>"]


def test_vllm_model_args_are_lm_evals_own_or_pass_through_to_vllm():
    """Checked against the installed lm-eval's source, for the GPU and the CPU settings (no engine is built)."""
    source = Path(importlib.util.find_spec("lm_eval.models.vllm_causallms").origin).read_text()
    cls = next(n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef) and n.name == "VLLM")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    own = {a.arg for a in init.args.args + init.args.kwonlyargs}
    assert init.args.kwarg is not None  # the rest goes into vllm.LLM(**kwargs)
    assert {"pretrained", "dtype", "seed", "tensor_parallel_size", "data_parallel_size", "max_model_len"} <= own
    for gpu, passed_through in ((True, {"gpu_memory_utilization", "enable_prefix_caching"}),
                                (False, {"enforce_eager", "enable_prefix_caching", "enable_chunked_prefill"})):
        args = backends.vllm_model_args(Path("/m"), seed=3, tensor_parallel_size=2, max_model_len=5120, gpu=gpu)
        assert set(args) - own == passed_through
        assert args["seed"] == 3 and args["tensor_parallel_size"] == 2 and args["data_parallel_size"] == 1


# --- end to end with a scripted LM ----------------------------------------------------------------------


def _answer_text(family: str, doc: dict, right: bool) -> str:
    if family == "mmlu":
        letter = doc["answer"] if right else "ABCD"[("ABCD".index(doc["answer"]) + 1) % 4]
        return f"Thinking... the answer is ({letter})." if right else f"\\boxed{{{letter}}}"
    if family == "countdown":
        return f"<answer>{doc['answer']}</answer>" if right else "<answer>1+1</answer>"
    return f"Step by step. \\boxed{{{doc['answer']}}}" if right else "\\boxed{wrong}"


class ScriptedLM(LM):
    """An lm-eval LM whose j-th sample for problem d is correct iff j < d mod (K + 1): known counts per problem."""

    def __init__(self, docs_by_prompt: dict[str, tuple[str, int, dict]]):
        super().__init__()
        self.docs_by_prompt, self.calls = docs_by_prompt, Counter()

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            # A task with worked examples (small sums) asks its problem after them: the problem's text ends it.
            prompt = max((p for p in self.docs_by_prompt if req.args[0].endswith(p)), key=len)
            family, index, doc = self.docs_by_prompt[prompt]
            j = self.calls[prompt]
            self.calls[prompt] += 1
            out.append(_answer_text(family, doc, right=j < index % (K + 1)))
        return out

    def loglikelihood(self, requests):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests):
        raise NotImplementedError


def test_every_task_scores_all_k_samples_of_every_problem(prepared, tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    tasks = taskfiles.available_tasks()
    files = {t: prepared / taskfiles.data_file(t) for t in tasks}
    out = taskfiles.render(files, tmp_path / "tasks", K, GEN)
    rendered_utils = _utils_module(out)
    limit = 5
    docs_by_prompt, expected = {}, {}
    for task in tasks:
        family = taskfiles.family(task)
        doc_to_text = getattr(rendered_utils, taskfiles.load_task(task)["doc_to_text"].split(".")[1])
        rows = read_jsonl(files[task])[:limit]
        for i, row in enumerate(rows):
            docs_by_prompt[doc_to_text(row)] = (family, i, row)
        counts = [i % (K + 1) for i in range(len(rows))]
        expected[task] = {"acc": sum(c / K for c in counts) / len(rows),
                          "pass_at_n": sum(pass_at_k(K, c, K) for c in counts) / len(rows),
                          "maj_at_n": sum(c * 2 > K or (c * 2 == K and c > 0) for c in counts) / len(rows)}
    result = lm_eval.simple_evaluate(model=ScriptedLM(docs_by_prompt), tasks=tasks, limit=limit, log_samples=True,
                                     task_manager=TaskManager(include_path=str(out), include_defaults=False),
                                     bootstrap_iters=0)
    for task in tasks:
        got = result["results"][task]
        assert got["n_samples,all"] == K, task
        for metric, value in expected[task].items():
            assert got[f"{metric},all"] == pytest.approx(value), (task, metric)
        assert all(len(s["filtered_resps"][0]) == K for s in result["samples"][task])


def _utils_module(rendered: Path):
    spec = importlib.util.spec_from_file_location("rendered_utils", rendered / "utils.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_take_first_filter_is_refused_not_silently_scored(prepared, tmp_path):
    """lm-eval's default filter keeps only the first of the k samples; process_results refuses that input."""
    out = taskfiles.render({"tiny": prepared / "tiny_test.jsonl"}, tmp_path, K, GEN)
    utils = _utils_module(out)
    doc = read_jsonl(prepared / "tiny_test.jsonl")[0]
    with pytest.raises(TypeError, match="keep_all"):
        utils.process_tiny(doc, ["\\boxed{1}"])
    assert utils.process_tiny(doc, [["\\boxed{1}"] * K])["n_samples"] == K


def test_eval_grader_renders_each_math_task_s_scorer_and_leaves_the_others(prepared, tmp_path):
    """eval.grader reaches lm-eval's process_results: a task with a math answer scores through
    `process_<family>_<grader>` (a function of utils.py), MMLU and Countdown keep theirs; `ours` renders as before."""
    files = {t: prepared / taskfiles.data_file(t) for t in ("math500", "tiny", "mmlu_college_physics", "countdown")}
    plain = {t: taskfiles.render_task(t, f, K, GEN) for t, f in files.items()}
    for name in ("hendrycks", "math_verify"):
        out = taskfiles.render(files, tmp_path / name, K, GEN, name)
        utils = _utils_module(out)
        for task in files:
            cfg = taskfiles.render_task(task, files[task], K, GEN, name)
            if taskfiles.family(task) in taskfiles.MATH_ANSWERS:
                assert cfg["process_results"] == f"{plain[task]['process_results']}_{name}"
                assert callable(getattr(utils, cfg["process_results"].split(".")[1]))
            else:
                assert cfg == plain[task], task
    utils = _utils_module(taskfiles.render(files, tmp_path / "ours", K, GEN))
    doc = {"answer": "\\text{Evelyn}", "problem": "Who?"}
    assert utils.process_math(doc, [["\\boxed{Evelyn}"] * K])["acc"] == 1.0
    assert utils.process_math_hendrycks(doc, [["\\boxed{Evelyn}"] * K])["acc"] == 0.0  # the gold's format only
