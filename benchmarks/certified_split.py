"""A split of the Python documentation at d = 768, found elsewhere, certified both ways.

:func:`skntp.svm.certify_split` checks a candidate split, whoever found it: the rows
held not separable by the analytic center of their polytope
(:func:`skntp.svm.analytic_center_of_rows`), the others separable by the candidate's
direction projected onto the cone's ties and lifted token by token where a margin is at
its rounding.  The candidate is read from two ``.npy`` files: an ``(m, V)`` boolean mask
of the held rows and a ``(V, d)`` direction for the contexts (the one measured in
``benchmarks/README.md`` was found by experiments outside the package, a HiGHS program
on the rows of four tokens and Douglas-Rachford projections, and is not shipped: the
direction alone is 13 MB).  Printed: each phase's time (from the package's log), the
rows on each side, and the peak resident memory.

Run::

    python benchmarks/certified_split.py --held HELD.npy --direction W.npy
    [--case python-768]
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def main():
    from corpus_scale import _contexts_and_supports

    from skntp.svm import certify_split

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="python-768")
    parser.add_argument("--held", required=True)
    parser.add_argument("--direction", required=True)
    args = parser.parse_args()
    logging.basicConfig(format="  %(relativeCreated)8.0f ms  %(message)s")
    logging.getLogger("skntp.svm").setLevel(logging.INFO)
    H, S = _contexts_and_supports(args.case)
    held = np.load(args.held) & ~S
    direction = np.load(args.direction)
    print(f"{args.case}: {H.shape[0]} contexts, V = {S.shape[1]}, d = {H.shape[1]}, "
          f"{int((~S).sum())} margin rows, {int(held.sum())} held; load "
          f"{os.getloadavg()[0]:.2f}")
    start = time.perf_counter()
    split = certify_split(H, S, held, direction)
    took = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if split is None:
        print(f"  not certified, {took:.1f} s; peak RSS {peak:.2f} GiB")
        return
    print(f"  certified both ways in {took:.1f} s: {split.n_separable} rows separable, "
          f"{split.n_rows - split.n_separable} not; peak RSS {peak:.2f} GiB, load "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
