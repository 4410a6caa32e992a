#!/usr/bin/python3
"""Run the float64 reference on a Hugging Face model directory.

  /usr/bin/python3 python/reference/eval_hf.py DIR --ids 1,2,3 --out FILE
  /usr/bin/python3 python/reference/eval_hf.py DIR --ids-file ids.i32 --out FILE

Writes float64 little-endian logits [n][vocab] (every position) to FILE.
Accepts F32/F16/BF16 weights, single-file or sharded (index json).
Exit status 1 with a one-line message when the directory is not valid.
"""

import argparse
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf  # noqa: E402
import safetensors_io as st  # noqa: E402
from model import forward  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", help="HF model directory (config.json + safetensors)")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--ids", help="comma-separated token ids")
    g.add_argument("--ids-file", help="int32 little-endian token ids")
    ap.add_argument("--out", required=True, help="output file: float64 LE [n][vocab]")
    args = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    if args.ids is not None:
        ids = [int(s) for s in args.ids.split(",") if s.strip()]
    else:
        ids = np.fromfile(args.ids_file, dtype="<i4").tolist()
    if not ids:
        print("eval_hf: no token ids given", file=sys.stderr)
        return 2
    try:
        cfg, params, hfc, _ = hf.load_hf_dir(args.dir)
        with torch.no_grad():
            logits = forward(cfg, params, ids)
    except (hf.HFError, st.SafetensorsError, ValueError, AssertionError) as e:
        print(f"eval_hf: {e}", file=sys.stderr)
        return 1
    np.ascontiguousarray(logits.numpy().astype("<f8")).tofile(args.out)
    print(f"eval_hf: {hfc['model_type']} {len(ids)} tokens x {cfg.vocab} logits -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
