#!/usr/bin/python3
"""The chapter's RoPE relative-position check, both layouts, head_dim 8:
score(m, n) = <rope(q, m), rope(k, n)> depends only on n - m, so
score(5,2) == score(40,37) and score(10,10) == score(0,0).

  /usr/bin/python3 python/reference/rope_check.py
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from model import DT, apply_rope, rope_inv_freq  # noqa: E402


def main():
    dh = 8
    g = torch.Generator().manual_seed(0)
    q = torch.randn(dh, generator=g, dtype=DT)
    k = torch.randn(dh, generator=g, dtype=DT)
    inv = rope_inv_freq(dh, 10000.0)

    ok = True
    for layout in ("half", "interleaved"):
        def score(m, n):
            qm = apply_rope(q[None], torch.tensor([float(m)], dtype=DT), inv, layout)[0]
            kn = apply_rope(k[None], torch.tensor([float(n)], dtype=DT), inv, layout)[0]
            return float((qm * kn).sum())

        a, b, c, d = score(5, 2), score(40, 37), score(10, 10), score(0, 0)
        print(f"{layout:12s} score(5,2)={a:.15f} score(40,37)={b:.15f} "
              f"score(10,10)={c:.15f} score(0,0)={d:.15f}")
        good = abs(a - b) < 1e-12 and abs(c - d) < 1e-12 and abs(a - c) > 1e-6
        ok &= good
        print(f"{'':12s} |diff|: {abs(a - b):.2e} {abs(c - d):.2e} -> {'ok' if good else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
