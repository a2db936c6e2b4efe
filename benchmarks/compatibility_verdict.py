"""NTP_H-compatibility (Def. 3.1) of whole corpora: one constant per context (#49).

Whether the log-odds equations (3) are solvable, where the decoder needs only the
verdict (data not NTP-separable, whose finite part is ``W_fin``):
``skntp.svm.log_odds_solvable`` (the least squares in one constant per context, on the
tokens whose contexts are linearly dependent) against, in the same run, the reference,
what the decoder ran before: LSQR on the equations themselves, on an orthonormal basis
of the contexts' span, within the work budget of 2e10 (``(V + rows) d`` per
iteration).  Both verdicts, their relative residuals (each its own: the equations' for
LSQR, the log-probabilities' for the constants) and times are printed, with the load
average before and after.  Usage::

    python benchmarks/compatibility_verdict.py [--cases python-768 stdlib-768]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np


def _data(case):
    from corpus_scale import _load

    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets

    X, y = _load(case)
    _, Y = next_token_targets(y, len(y), None)
    H, _, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    return H, P


def _lsqr_on_basis(H, P):
    """The decoder's verdict before: LSQR on the equations on an orthonormal basis."""
    from skntp.svm import BilinearScores, log_odds_problem, orthonormal_contexts, solve_min_norm

    equations = log_odds_problem(H, P)
    V, d = equations.shape
    n_rows = len(equations.constraints)
    budget = max(100, int(2e10 / ((V + n_rows) * d)))
    on_basis = dataclasses.replace(
        equations, scores=BilinearScores(orthonormal_contexts(H), None, n_outputs=V))
    _, residual, converged = solve_min_norm(on_basis, max_iter=budget,
                                            return_converged=True)
    return (True if residual <= 1e-8 else (False if converged else None)), residual, n_rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["python-768"])
    args = parser.parse_args()
    from skntp.svm import log_odds_solvable

    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} cores")
    for case in args.cases:
        H, P = _data(case)
        m, V = P.shape
        start = time.perf_counter()
        verdict, residual = log_odds_solvable(H, P)
        ours = time.perf_counter() - start
        carry = int(np.count_nonzero(np.diff(P.indptr) >= 2))
        print(f"{case}: m = {m}, V = {V}, d = {H.shape[1]}, {carry} contexts with an "
              f"equation", flush=True)
        print(f"  one constant per context: {verdict} (relative residual {residual:.3g}) "
              f"in {ours:.1f} s", flush=True)
        start = time.perf_counter()
        verdict, residual, n_rows = _lsqr_on_basis(H, P)
        print(f"  reference, LSQR on the {n_rows} equations (basis): {verdict} (relative "
              f"residual {residual:.3g}) in {time.perf_counter() - start:.1f} s", flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
