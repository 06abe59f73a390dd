"""Every path a job reads, resolved at submission into the cell's own config and checked there.

A job runs from the sweep's code snapshot, on a node whose working directory, environment and filesystem may not be
the login node's (the checkout renamed, `--export=NONE`). So `orchestrate sweep` writes into each cell's config.yaml,
as absolute paths, the training and validation files (`data: math` with no path: the files `orchestrate data
prepare` wrote, under $COMEDY_DATA or <checkout>/data), the model (a local directory or GGUF file made absolute; a
hub id: its snapshot in the Hugging Face cache, which compute nodes read offline) and the tracking store (a SQLite
file's absolute URI). Every missing thing is one problem, naming the command that fixes it, refused before
anything is submitted.

Data files that live inside the checkout (the default: `orchestrate data prepare` writes <checkout>/data) are
carried with the sweep (`carry`): copied once per content into `<sweep_dir>/data/<hash>/`, like the code snapshot,
so renaming, pruning or switching the checkout never reaches a queued job. Files elsewhere (a shared $COMEDY_DATA)
are read where they are.

None of these enters the training identity (record/identity/fields.py: machinery; the model by its weights,
record/identity/weights.py),
so moving the data or fetching the model into a directory changes no run_key. The evaluation's data directory
travels in the job's prologue (COMEDY_DATA, orchestrator/cluster/site.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

from eval import local_data, taskfiles
from trainer.config.run import TINY_MODEL, RunConfig
from trainer.tasks.data import DEFAULT_FILES, GENERATED, data_dir

REPO = Path(__file__).resolve().parents[2]  # the checkout this code runs from
NAMED_MODELS = (TINY_MODEL, "smollm2-135m-instruct")  # built in the project's cache (trainer/model/source.py)
WEIGHTS = (".safetensors", ".bin", ".pt", ".pth")
TOKENIZER = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


@dataclasses.dataclass
class Resolver:
    """Resolves the cells of one sweep (`sweep`: its file, for the commands in the messages); `problems` collects
    each distinct problem once, however many cells share it."""

    sweep: str
    data: Path = dataclasses.field(default_factory=lambda: data_dir().absolute())
    cwd: Path = dataclasses.field(default_factory=Path.cwd)
    problems: dict[str, None] = dataclasses.field(default_factory=dict)
    carried: dict[str, Path] = dataclasses.field(default_factory=dict)  # file name -> a file inside the checkout
    # the data, model and eval sections -> those resolved: the cells of a sweep share a few of these, and looking
    # at the filesystem once per distinct one, not per cell, keeps 10,000 cells fast (issue 25)
    _done: dict = dataclasses.field(default_factory=dict)

    def resolve(self, config: RunConfig) -> RunConfig:
        d, m, t, e = config.data, config.model, config.tracking, config.eval
        # by the sections' identity (the cells share their objects; hashing a section hashes its every field), the
        # sections held in the entry so that no id is reused while it is there
        held = self._done.get(key := (id(d), id(m), id(e)))
        if held is None or held[0] is not d or held[1] is not m or held[2] is not e:
            held = self._done[key] = (d, m, e, dataclasses.replace(
                d, train_path=self._data(config, "train_path", "train"),
                val_path=self._data(config, "val_path", d.val_split)),
                dataclasses.replace(m, name_or_path=self._model(m.name_or_path)))
            self._eval_files(config)
        uri = self._tracking(t.tracking_uri)  # read each time: it follows this process's MLFLOW_TRACKING_URI
        tracked = self._done.get(where := (id(t), uri))
        if tracked is None or tracked[0] is not t:  # one object per URI: the cells share their tracking section too
            tracked = self._done[where] = (t, dataclasses.replace(t, tracking_uri=uri))
        return config.with_locations(data=held[3], model=held[4], tracking=tracked[1])

    def _note(self, problem: str) -> None:
        self.problems[problem] = None

    def _data(self, config: RunConfig, key: str, split: str) -> str | None:
        given, dataset = getattr(config.data, key), config.data.dataset
        needed = key == "train_path" or config.data.val_every > 0
        if given is None:
            default = DEFAULT_FILES.get((dataset, split))
            if default is None:  # generated tasks (tiny, fractions, ...) need no file
                if dataset not in GENERATED and needed:
                    self._note(f"data.{key}: not set, and dataset {dataset!r} has no default file for split "
                               f"{split!r}; set data.{key} to a jsonl file with problem and answer fields")
                return None
            file = self.data / default
        else:
            file = Path(os.path.abspath(self.cwd / Path(given).expanduser()))
        if needed and not file.is_file():
            fix = (f"run `orchestrate data prepare --out {file.parent}`" if given is None else
                   f"fix data.{key} in {self.sweep} (relative paths are read from {self.cwd})")
            self._note(f"data.{key}: {file} does not exist; {fix}")
        self._carry(file)
        return str(file)

    def _carry(self, file: Path) -> None:
        if not file.is_file() or not file.resolve().is_relative_to(REPO):
            return
        if self.carried.setdefault(file.name, file) != file:
            self._note(f"data: {file} and {self.carried[file.name]} share a name inside the checkout; rename one "
                       f"(the sweep carries both into one directory)")

    def carry(self, sweep_dir: Path, configs: list[RunConfig]) -> list[RunConfig]:
        """Copy the files inside the checkout into `<sweep_dir>/data/<content hash>/` (once per content; the data
        directory moves there too when it is inside the checkout) and point the configs at the copies."""
        if not self.carried:
            return configs
        digest = hashlib.sha256()
        for name, file in sorted(self.carried.items()):
            digest.update(name.encode() + b"\0" + file.read_bytes() + b"\0")
        target = Path(os.path.abspath(sweep_dir)) / "data" / digest.hexdigest()[:12]
        if not target.is_dir():
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.mkdir(parents=True, exist_ok=True)
            for name, file in self.carried.items():
                shutil.copy2(file, tmp / name)
            try:
                os.rename(tmp, target)
            except OSError:  # another orchestrator carried the same files first
                shutil.rmtree(tmp, ignore_errors=True)
        moved = {str(file): str(target / name) for name, file in self.carried.items()}
        if self.data.resolve().is_relative_to(REPO):
            self.data = target

        def where(path: str | None) -> str | None:
            return moved.get(path, path) if path else path

        carried: dict = {}  # one new data section per distinct one, not per cell

        def data_of(d):
            if d not in carried:
                carried[d] = dataclasses.replace(d, train_path=where(d.train_path), val_path=where(d.val_path))
            return carried[d]

        return [c.with_locations(data=data_of(c.data)) for c in configs]

    def _model(self, name: str) -> str:
        if name in NAMED_MODELS:
            return name
        local = Path(os.path.abspath(self.cwd / Path(name).expanduser()))
        if name.startswith(("/", ".", "~")) or local.exists():
            if local.suffix == ".gguf":
                if not local.is_file():
                    self._note(f"model.name_or_path: {local} does not exist; give the GGUF file's path")
            else:
                for missing in missing_parts(local):
                    self._note(f"model.name_or_path: {local} has no {missing}; give a directory that "
                               f"save_pretrained wrote, or a hub id fetched with `orchestrate models fetch`")
            return str(local)
        snapshot = hub_snapshot(name)
        if snapshot is None or missing_parts(snapshot):
            from huggingface_hub import constants as hf_constants  # noqa: PLC0415 - 0.1 s of imports: hub ids only
            self._note(f"model.name_or_path: {name} is not (wholly) in the Hugging Face cache "
                       f"({hf_constants.HF_HUB_CACHE}); compute nodes run offline: run `orchestrate models fetch "
                       f"{self.sweep}` on a login node, or give a local directory")
            return name
        return str(snapshot)

    def _tracking(self, uri: str | None) -> str | None:
        """A SQLite file's URI made absolute (a job's working directory is not the launch's); none given: this
        process's MLFLOW_TRACKING_URI, else the default store under ./runs, fixed here."""
        if not uri:
            env = os.environ.get("MLFLOW_TRACKING_URI")
            if env and "@" in env.split("://", 1)[-1].split("/", 1)[0]:
                return uri  # credentials in the URI stay out of config.yaml: the job gets them from sbatch
            uri = env or f"sqlite:///{self.cwd / 'runs' / 'mlflow.db'}"
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            return f"sqlite:///{os.path.abspath(self.cwd / uri[len('sqlite:///'):])}"
        return uri

    def _eval_files(self, config: RunConfig) -> None:
        for task in config.eval.tasks:
            try:
                file = self.data / taskfiles.data_file(task)
            except (OSError, KeyError, TypeError, ValueError):
                continue  # an unknown task is the sweep checks' to refuse
            if not file.is_file() and not local_data.is_generated(file.name):  # generated in the job
                self._note(f"eval.tasks: {task} reads {file}, which does not exist; run `orchestrate data prepare "
                           f"--out {self.data}`")
            self._carry(file)


def missing_parts(directory: Path) -> list[str]:
    """What a checkpoint directory lacks of config.json, a tokenizer and weights (every shard its index names)."""
    if not directory.is_dir():
        return ["directory (it does not exist)"]
    names = {p.name for p in directory.iterdir()}
    out = [] if "config.json" in names else ["config.json"]
    if not names & set(TOKENIZER):
        out.append("tokenizer (tokenizer.json, tokenizer.model or vocab.json)")
    index = next((directory / n for n in names if n.endswith(".index.json")), None)
    if index is not None:
        try:
            shards = set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            shards = {index.name}
        out += [f"weight shard {s}" for s in sorted(shards - names)]
    elif not any(n.endswith(WEIGHTS) for n in names):
        out.append("weights (*.safetensors or *.bin)")
    return out


def hub_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot directory of a hub model's default revision, or None when its config.json is not there."""
    from huggingface_hub import try_to_load_from_cache  # noqa: PLC0415 - 0.1 s of imports, for hub ids only

    try:
        found = try_to_load_from_cache(repo_id, "config.json")
    except ValueError:  # not a valid repo id
        return None
    return Path(found).parent if isinstance(found, str) else None
