#!/usr/bin/env bash
# The main job: install what is needed, build, and run mtb's default job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
./build/mtb demo
