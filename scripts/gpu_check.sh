#!/usr/bin/env bash
# Ready GPU check of the vLLM backend, in under 8 minutes on one GPU.
#
#   bash scripts/gpu_check.sh [--dry-run] [gpu_check.py options]   run the check (see --help)
#   bash scripts/gpu_check.sh --serve MODEL [load_test.py options]  serving side by side with vllm serve
#   bash scripts/gpu_check.sh --prepare [PYTHON_VERSION]            fill .whl/ here, on a machine with pip access
#
# The GPU machine has no network: everything it lacks comes from wheels in .whl/ (ignored by git;
# carry it), installed with `pip install --no-index` into /tmp/recontext-site. The model is a tiny
# random Llama built on the spot, or --model DIR. --serve runs scripts/load_test.py on one GPU (MODEL: a
# local folder, or a hub id where the hub is reachable): `vllm serve` and `recontext serve --backend
# vllm` (R=0, R=2) on ~1K and ~4K-token contexts, 1/4/16 clients, its table and plot in gpu-serve/. Exit codes: 0 passed, 1 a check failed,
# 3 vLLM or CUDA unavailable (the paged-KV check on the GPU still ran), 4 the install failed.
set -uo pipefail
cd "$(dirname "$0")/.."

WHEELS=.whl
SITE=/tmp/recontext-site
# vLLM's own pins (torch, xformers, flashinfer, ...) come with it in .whl/; keep this range in step
# with pyproject.toml's [vllm] extra and docs/vllm.md.
VLLM_SPEC='vllm>=0.11,<0.34'

usage() {
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    echo
    echo "gpu_check.py options: --dry-run --model DIR --heads JSON --cases N --sentences N"
    echo "                      --max-model-len N --gpu-share F --eager --attention-backend NAME --out FILE"
}

prepare() {
    # Wheels for the GPU machine's Python (3.12 there by default): recontext's small pure-Python
    # needs, then vLLM with everything it pins. vLLM and its CUDA libraries run to several GiB:
    # more than a 64 MiB working-tree transfer can carry; see docs/vllm.md.
    local py="${1:-3.12}"
    mkdir -p "$WHEELS"
    grep -qxF "/$WHEELS/" .gitignore 2>/dev/null || echo "/$WHEELS/" >>.git/info/exclude
    local platform=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
    python3 -m pip download --no-deps --only-binary=:all: --python-version "$py" --implementation cp \
        "${platform[@]}" -d "$WHEELS" sentencex gguf || return 4
    if [[ "${RECONTEXT_PREPARE_VLLM:-0}" == 1 ]]; then
        python3 -m pip download --only-binary=:all: --python-version "$py" --implementation cp \
            "${platform[@]}" -d "$WHEELS" "$VLLM_SPEC" || return 4
    else
        echo "skipping vLLM itself (set RECONTEXT_PREPARE_VLLM=1 to download it and its pins)"
    fi
    du -sh "$WHEELS"
}

install_wheels() {
    # Only what is missing: the GPU image already has torch and transformers.
    [[ -d "$WHEELS" ]] && compgen -G "$WHEELS/*.whl" >/dev/null || { echo "no wheels in $WHEELS/"; return 0; }
    echo "installing $(ls "$WHEELS"/*.whl | wc -l) wheels from $WHEELS/ into $SITE"
    timeout 240 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" "$WHEELS"/*.whl || return 4
}

serve() {
    local model=${1:?--serve needs a model: a local folder or a hub id}
    shift
    nvidia-smi -L 2>/dev/null || echo "nvidia-smi: no GPU listed"
    install_wheels || { echo "wheel install failed"; return 4; }
    export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 VLLM_NO_USAGE_STATS=1
    timeout 470 python3 scripts/load_test.py --anchor --backend vllm --model "$model" --out gpu-serve "$@"
}

case "${1:-}" in
    -h | --help) usage; exit 0 ;;
    --prepare) shift; prepare "$@"; exit $? ;;
    --serve) shift; serve "$@"; exit $? ;;
esac

dry=0
for arg in "$@"; do [[ "$arg" == --dry-run ]] && dry=1; done
if [[ $dry == 0 ]]; then
    nvidia-smi -L 2>/dev/null || echo "nvidia-smi: no GPU listed"
    install_wheels || { echo "wheel install failed"; exit 4; }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1
start=$(date +%s)
timeout 420 python3 scripts/gpu_check.py "$@"
code=$?
echo "gpu_check: exit $code after $(($(date +%s) - start)) s"
exit $code
