"""The program of the contexts' labels against the cycles, on the Python documentation.

On the whole Python documentation at d = 768 (11,071 two-word contexts, V = 2,128) the
cycles (:func:`skntp.svm.cycle_certificate`) certify 13,750 rows not separable.  The
program of the contexts' labels (:func:`skntp.svm.label_certificate`: each token's
logit at a context as one free value per word, all tokens at once, by HiGHS) proves
rows with tables of three or more tokens; it runs with the cycles' rows as ties, and
its tables are recomputed by :func:`skntp.svm.check_label_certificate`.  Printed: each
step's time, the rows, and the peak resident memory; the reference, in the same run,
is the cycles.

Run::

    python benchmarks/label_program.py [--case python-768]
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))


def main():
    from corpus_scale import _contexts_and_supports

    from skntp.svm import (
        check_cycle_certificate,
        check_label_certificate,
        cycle_certificate,
        label_certificate,
    )

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="python-768")
    args = parser.parse_args()
    logging.basicConfig(format="  %(message)s")
    logging.getLogger("skntp.svm").setLevel(logging.INFO)
    H, S = _contexts_and_supports(args.case)
    print(f"{args.case}: {H.shape[0]} contexts, V = {S.shape[1]}, d = {H.shape[1]}, "
          f"{int((~S).sum())} margin rows, load {os.getloadavg()[0]:.2f}")
    start = time.perf_counter()
    cycles = check_cycle_certificate(H, S, cycle_certificate(H, S))
    print(f"  reference, the cycles (found and checked): {int(cycles.sum()):7d} rows "
          f"{time.perf_counter() - start:7.1f} s")
    start = time.perf_counter()
    certificate = label_certificate(H, S, equal=cycles)
    found = time.perf_counter() - start
    start = time.perf_counter()
    rows = check_label_certificate(H, S, certificate, equal=cycles)
    checked = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"  the program of the labels:                 {int(rows.sum()):7d} rows more "
          f"({certificate.n_rounds} rounds, {len(certificate)} table entries), found in "
          f"{found:.1f} s, checked in {checked:.1f} s; peak RSS {peak:.2f} GiB, load "
          f"{os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
