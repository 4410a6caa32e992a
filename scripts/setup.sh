#!/usr/bin/env bash
# Installs every system package mtb needs (Debian 12, run as root).
# This is the only place where dependencies are named.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config   # toolchain
  nlohmann-json3-dev libcli11-dev                # JSON, command line
  libgtest-dev libgmock-dev libbenchmark-dev     # tests, kernel benchmarks
  python3 python3-numpy python3-torch            # the PyTorch reference oracle (/usr/bin/python3)
  libpcre2-dev libutf8proc-dev                   # tokenizers: split regexes, Unicode normalization
  python3-jinja2                                 # chat templates: the reference renderer
  libcairo2-dev                                  # mtb plot: SVG and PNG charts
  libopenblas0-openmp                            # PyTorch's BLAS for the speed comparisons in bench/
  fortunes                                       # the default training corpus
)
# Node.js and npm run Hugging Face's tokenizers (npm) as the tokenizer tests' reference;
# Debian's, unless a node with npm is already installed.
command -v npm > /dev/null 2>&1 || PACKAGES+=(nodejs npm)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#PACKAGES[@]} packages present"
fi
