#!/usr/bin/env bash
# Wheels for the GPU machine (issue 27), built here: what a training cell imports that its image lacks (DeepSpeed,
# MLflow's client and their needs), for its Python 3.12, at the versions constraints.txt pins. Its own torch and
# transformers are used as they are. Writes .whl/ (kept out of git by .git/info/exclude), at most 60 MiB: the device
# tool carries 64 MiB a call with the working tree (about 5 MiB).
#
#     bash bench/gpu/wheels.sh        # then: device run, carry [".whl"], command "bash bench/gpu/run.sh"
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.whl
grep -qxF "/$dir/" .git/info/exclude 2>/dev/null || echo "/$dir/" >> .git/info/exclude
mkdir -p "$dir"

# The image's package list (device tool, KINDS.md) against what a training step imported here (the gpu test's body
# run on CPU, sys.modules at its end), then the Requires-Dist of those wheels: these are missing there. vLLM is not among them: its CUDA wheel is hundreds
# of MB, past what a call carries (docs/gpu.md).
needed=(deepspeed hjson pydantic pydantic_core annotated-types typing-inspection
        mlflow-skinny mlflow-tracing alembic sqlalchemy sqlparse mako cachetools databricks-sdk google-auth
        googleapis-common-protos opentelemetry-api opentelemetry-sdk opentelemetry-proto
        opentelemetry-semantic-conventions opentelemetry-exporter-otlp-proto-http
        opentelemetry-exporter-otlp-proto-common fastapi starlette python-multipart email-validator cryptography
        importlib_metadata more-itertools sniffio chardet dill pytz wcwidth
        # what those require and the image lacks, though a training step here imported none of them
        cffi pycparser dnspython gitpython gitdb smmap opentelemetry-exporter-http-transport
        opentelemetry-exporter-otlp-common pyasn1-modules pyasn1 python-dotenv uvicorn)
pin() {  # NAME==VERSION from constraints.txt, whatever its spelling (- or _, case)
  local pattern
  pattern=$(echo "$1" | sed 's/[-_]/[-_]/g')
  grep -i -E "^${pattern}==" constraints.txt | head -1 || { echo "no pin for $1 in constraints.txt" >&2; exit 1; }
}
pins=()
for name in "${needed[@]}"; do
  [ "$name" = deepspeed ] || pins+=("$(pin "$name")")
done
platforms=()
for n in 2_34 2_28 2_27 2_17; do platforms+=(--platform "manylinux_${n}_x86_64"); done
.venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$dir" "${pins[@]}"
# DeepSpeed is an sdist: built here without its ops (a py3-none-any wheel); it JIT-builds what it needs there.
DS_BUILD_OPS=0 .venv/bin/pip wheel -q --no-deps --no-build-isolation -w "$dir" "$(pin deepspeed)"

# Every requirement of these wheels is in the image or among them (markers for Python 3.12 on x86-64 Linux).
.venv/bin/python bench/gpu/requires.py "$dir"
size=$(du -sm "$dir" | cut -f1)
echo "$(ls "$dir"/*.whl | wc -l) wheels in $dir: ${size} MiB"
if [ "$size" -gt 60 ]; then
  echo "over 60 MiB: the device tool carries 64 MiB a call, the working tree included" >&2
  exit 1
fi
