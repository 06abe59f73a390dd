#!/usr/bin/env bash
# The GPU machine's one command (issue 27): install the carried wheels, record the machine, run the gpu tests,
# then a training cell of the paper's shape for each model shape named (bench/gpu/cell.py; default: Qwen2.5-0.5B's
# and Qwen2.5-1.5B's published shapes). Everything it prints goes to $OUT too. Prepare here first:
# `bash bench/gpu/wheels.sh`; then, with the device tool, in two calls that each fit its 10 minutes:
#
#     run(command="bash bench/gpu/run.sh qwen2.5-0.5b", carry=[".whl"], timeout_s=560)
#     run(command="GPU_TESTS=0 bash bench/gpu/run.sh qwen2.5-1.5b", carry=[".whl"], timeout_s=560)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || { echo "the wheels did not install: run bench/gpu/wheels.sh here and carry .whl" >&2; exit 1; }
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python3 - <<'PY'
import importlib, sys
print("python", sys.version.split()[0])
for name in ("torch", "transformers", "deepspeed", "mlflow", "pydantic", "sqlalchemy"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as err:  # noqa: BLE001 - a report of what imports there, not a check
        print(name, "FAILED:", type(err).__name__, str(err).splitlines()[0] if str(err) else "")
import torch
print("cuda", torch.version.cuda, torch.cuda.get_device_name(), torch.cuda.get_device_capability())
PY
} 2>&1 | tee "$out/env.txt"

if [ "${GPU_TESTS:-1}" != 0 ]; then
  timeout 180 python3 -m pytest -m gpu tests/gpu -s -p no:cacheprovider 2>&1 | tail -40 | tee "$out/pytest.txt"
fi
for shape in "${@:-qwen2.5-0.5b qwen2.5-1.5b}"; do
  for one in $shape; do
    timeout 330 python3 bench/gpu/cell.py --shape "$one" --json "$out/cell-$one.json" 2>&1 \
      | grep -v "^\[20" | tail -60 | tee "$out/cell-$one.txt"
  done
done
