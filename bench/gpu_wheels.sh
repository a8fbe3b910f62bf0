#!/usr/bin/env bash
# Wheels that bench/gpu.py needs on a GPU machine that has Python 3.12, JAX (CUDA), NumPy,
# absl-py, rich, h5py, ml-dtypes, packaging, regex, requests, tqdm, PyYAML, tokenizers and
# safetensors, but no Keras, no TensorFlow and no network (../shared/PITFALLS.md).
# Run from the repository root, where pip reaches PyPI:
#
#     bash bench/gpu_wheels.sh
#
# Downloads into .whl/ (kept out of git through .git/info/exclude, which this script
# extends) the Python 3.12 wheels of:
#   keras 3.15.1      (Requires-Dist: absl-py numpy rich namex h5py optree ml-dtypes packaging)
#   keras-hub 0.32.0  (Requires-Dist: keras absl-py numpy packaging regex rich kagglehub
#                      kagglesdk sentencepiece tokenizers tensorflow-text)
#   namex, optree     (keras's needs the image lacks; optree's typing-extensions is there)
# Not carried: tensorflow-text (needs TensorFlow; keras-hub imports it only inside its
# TF-based tokenizers, which bench/gpu.py does not use) and kagglehub/kagglesdk (keras-hub
# imports kagglehub in a try and runs without it; only preset downloads need it, and a
# kagglehub that cannot import its kagglesdk would make keras-hub's import fail).
# and prints each file's size and the total (what travels counts towards the 64 MiB limit).
# Then the device command (one line; bench/gpu.py's docstring has it too):
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:. KERAS_BACKEND=jax PYTHONUNBUFFERED=1 && python3 -m bench.gpu --output $OUT/gpu.json
#
# with `.whl` named in the run's carry.
set -euo pipefail

cd "$(git rev-parse --show-toplevel)"
exclude="$(git rev-parse --git-common-dir)/info/exclude"
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"

WHEELS=(keras==3.15.1 keras-hub==0.32.0 namex==0.1.0 optree==0.20.0)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
           manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64)

rm -rf .whl
mkdir -p .whl
platform_args=()
for p in "${PLATFORMS[@]}"; do platform_args+=(--platform "$p"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${platform_args[@]}" -d .whl "${WHEELS[@]}"

echo "wheels in .whl/ (for Python 3.12, x86-64):"
total=0
for f in .whl/*.whl; do
    size=$(stat -c %s "$f")
    total=$((total + size))
    printf '  %8.2f MiB  %s\n' "$(echo "$size / 1048576" | bc -l)" "$(basename "$f")"
done
printf '  %8.2f MiB  total\n' "$(echo "$total / 1048576" | bc -l)"
count=$(ls .whl/*.whl | wc -l)
if [ "$count" -ne "${#WHEELS[@]}" ]; then
    echo "expected ${#WHEELS[@]} wheels, got $count" >&2
    exit 1
fi
