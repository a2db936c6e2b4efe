"""The memory of cvxpy's conic form, against :func:`skntp.svm.solvers.conic.check_conic_size`.

Past the memory, Clarabel aborts the process ("memory allocation failed") or the system
kills it: on the NTP-SVM of the separable rows of real text (281,590 rows on 37,248
variables) the user's process was killed at 24 GB.  ``check_conic_size`` refuses such a
program before cvxpy builds it, from an estimate of ``CONIC_BYTES_PER_NONZERO`` per
nonzero of the constraint matrix and ``CONIC_BYTES_PER_VARIABLE_PAIR`` per pair of
variables.  This benchmark measures the peak memory of ``method="cvxpy"`` in a
subprocess per case (the NTP-SVM of every row of the first ``m`` contexts of the Python
documentation, two-word contexts of 64-dimensional word vectors, on the ``V`` most
frequent next words, all rows held separable: a program of the size the completion of a
stationary split builds), and prints it next to the estimate.  Usage::

    python benchmarks/conic_memory.py [--cases 200x40 400x40 300x80]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import time
import warnings

import numpy as np


def _case(m, V, queue):
    from skntp.datasets import load_text_ntp
    from skntp.svm import NTPSeparability, orthonormal_contexts, solve_max_margin
    from skntp.svm._ntp_partial import partial_ntp_svm_problem
    from skntp.svm.solvers import conic

    X, y = load_text_ntp(corpus="python", context_size=2, n_words=300, embedding="words",
                         n_features=64, n_sentences=300, return_X_y=True)
    H, inv = np.unique(X, axis=0, return_inverse=True)
    tokens, yi = np.unique(y, return_inverse=True)
    S = np.zeros((len(H), len(tokens)), bool)
    S[inv.ravel(), yi] = True
    top = np.argsort(-S.sum(axis=0), kind="stable")[:V]
    S, H = S[:m][:, top], H[:m]
    keep = S.any(axis=1)
    S, Q = S[keep], orthonormal_contexts(H[keep])
    problem = partial_ntp_svm_problem(Q, NTPSeparability(~S, S, "highs"))
    nnz = conic._constraint_nonzeros(problem)
    n_var = int(np.prod(problem.shape))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            status = solve_max_margin(problem, method="cvxpy").status
        except Exception as exc:  # (infeasible: every row held separable)
            status = type(exc).__name__
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    queue.put(dict(m=int(S.shape[0]), V=V, rows=len(problem.constraints), n_var=n_var,
                   nnz=nnz, seconds=time.perf_counter() - start, status=status,
                   measured=peak - before,
                   estimate=conic.CONIC_BYTES_PER_NONZERO * nnz
                   + conic.CONIC_BYTES_PER_VARIABLE_PAIR * n_var**2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["200x40", "400x40", "300x80"],
                        help="MxV: the first M contexts, the V most frequent next words")
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    print(f"{'m':>5} {'V':>4} {'rows':>7} {'variables':>9} {'nonzeros':>10} "
          f"{'status':>18} {'s':>6} {'peak GB':>8} {'estimate GB':>11} {'ratio':>6}")
    for case in args.cases:
        m, V = (int(x) for x in case.split("x"))
        queue = ctx.Queue()
        proc = ctx.Process(target=_case, args=(m, V, queue))
        proc.start()
        r = queue.get()
        proc.join()
        print(f"{r['m']:>5} {r['V']:>4} {r['rows']:>7} {r['n_var']:>9} {r['nnz']:>10} "
              f"{r['status']:>18} {r['seconds']:>6.1f} {r['measured'] / 1e9:>8.2f} "
              f"{r['estimate'] / 1e9:>11.2f} {r['estimate'] / r['measured']:>6.2f}",
              flush=True)


if __name__ == "__main__":
    main()
