#!/usr/bin/env bash
# Set up (venv, torch, attnlab[test], Debian chromium and nginx for the browser tests) and run the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
missing=""
command -v chromium >/dev/null 2>&1 || missing+=" chromium"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=" nginx"  # tests/e2e/test_replicas.py
command -v pdftotext >/dev/null 2>&1 || missing+=" poppler-utils"  # tests/app/test_tour_handout.py reads the PDF
if [ -n "$missing" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends $missing >/dev/null
fi
bash scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}  # 2 shared cores: one torch thread per process avoids oversubscription
export E2E_REQUIRE_BROWSER=1 CHROMIUM_PATH="$(command -v chromium)"
.venv/bin/ruff check model analysis app pages cli bench lecture attnlab tests
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
