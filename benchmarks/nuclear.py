"""The nuclear-norm ATT-SVM of factored attention: time against cvxpy, and ranks.

Every figure is measured in this run, each beside its reference:

* ``--part speed``: the whole call ``att_svm_w(X, Z, alpha, norm="nuclear")``
  (build, interior-point solve, certificate) at ``n = 50, T = 10, d = 32``
  (cross-attention, the setup of the public code of "Transformers as Support
  Vector Machines": unit tokens and queries, the tokens of largest score
  ``Y_i v^T x_it``), against the whole cvxpy call written as in that code
  (one constraint expression per token, ``cp.norm(W, "nuc")``), solved by SCS
  (cvxpy's default for it) and by Clarabel, and against skntp's own cvxpy
  path (``method="cvxpy"``: one vectorized constraint, Clarabel).  Each row
  gives the relative difference of the optimal value from Clarabel's and the
  certified relative duality gap.
* ``--part rank``: the authors' rank experiment (``n = 10, T = 10``, ``d`` from
  4 to 20): the rank of ``W^fro`` and ``W^nuc`` at a relative tolerance of
  1e-6 (:func:`skntp.metrics.numerical_rank`), infeasible instances counted
  apart; with ``--scs`` also the rank of SCS's solution counted as that code
  counts it (``numpy.linalg.matrix_rank(W, tol=1e-7)``).

Usage::

    python benchmarks/nuclear.py --part speed [--seeds 5]
    python benchmarks/nuclear.py --part rank [--seeds 20] [--scs]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def make_data(seed, n, T, d):
    """The authors' setup (:func:`skntp.datasets.make_key_query_data`): tokens, queries
    and the optimal tokens."""
    from skntp.datasets import make_key_query_data

    data = make_key_query_data(n, T, d, random_state=seed)
    return data.tokens, data.queries, data.optimal


def cvxpy_as_in_the_public_code(X, Z, selected, solver, norm="nuc"):
    """``W_svm_solver`` of the public code, in our orientation (logits ``z^T W x``)."""
    import cvxpy as cp

    n, T, d = X.shape
    W = cp.Variable((Z.shape[1], d))
    cons = []
    for i in range(n):
        for t in range(T):
            if t != selected[i]:
                cons.append(Z[i] @ W @ (X[i, t] - X[i, selected[i]]) <= -1)
    prob = cp.Problem(cp.Minimize(cp.norm(W, norm)), cons)
    prob.solve(solver=solver)
    return W.value, prob.status


def _nuc(W):
    return float(np.linalg.svd(W, compute_uv=False).sum())


def part_speed(args):
    import cvxpy as cp

    from skntp.svm import att_svm_w

    n, T, d = 50, 10, 32
    print(f"nuclear-norm ATT-SVM, n = {n}, T = {T}, d = {d} ({n * (T - 1)} constraints, "
          f"{d * d} variables); load {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'seed':>4} {'method':<34} {'time [s]':>9} {'value':>12} {'rel. diff':>10} "
          f"{'gap':>9} {'rank':>5}")
    rows = []
    for seed in range(args.seeds):
        X, Z, sel = make_data(seed, n, T, d)
        out = {}
        t0 = time.perf_counter()
        W, res = att_svm_w(X, Z, sel, norm="nuclear", return_result=True)
        out["skntp nuclear-ipm (whole call)"] = (time.perf_counter() - t0, W, res.gap)
        t0 = time.perf_counter()
        W, res = att_svm_w(X, Z, sel, norm="nuclear", method="cvxpy", return_result=True)
        out["skntp method='cvxpy' (Clarabel)"] = (time.perf_counter() - t0, W, res.gap)
        for name, solver in (("cvxpy as in the public code, SCS", cp.SCS),
                             ("cvxpy as in the public code, Clarabel", cp.CLARABEL)):
            t0 = time.perf_counter()
            W, _ = cvxpy_as_in_the_public_code(X, Z, sel, solver)
            out[name] = (time.perf_counter() - t0, W, float("nan"))
        ref = _nuc(out["cvxpy as in the public code, Clarabel"][1])
        from skntp.metrics import numerical_rank

        for name, (t, W, gap) in out.items():
            value = _nuc(W)
            print(f"{seed:>4} {name:<34} {t:>9.3f} {value:>12.8f} {abs(value - ref) / ref:>10.1e} "
                  f"{gap:>9.1e} {numerical_rank(W):>5}")
        rows.append({k: v[0] for k, v in out.items()})
    ours = np.median([r["skntp nuclear-ipm (whole call)"] for r in rows])
    print("median time and speed-up of the nuclear-ipm call over each reference:")
    for name in rows[0]:
        t = np.median([r[name] for r in rows])
        print(f"  {name:<38} {t:8.3f} s   x{t / ours:6.1f}")


def part_rank(args):
    from skntp.metrics import numerical_rank
    from skntp.svm import NotSeparableError, att_svm_w

    n, T = 10, 10
    print(f"rank of the ATT-SVM solutions, n = {n}, T = {T}, {args.seeds} seeds per d; "
          "relative tolerance 1e-6; load "
          f"{os.getloadavg()[0]:.2f}")
    head = f"{'d':>3} {'infeasible':>10} {'rank W^fro':>11} {'rank W^nuc':>11}"
    if args.scs:
        head += f" {'SCS W^nuc, abs. tol 1e-7':>25}"
    print(head)
    for d in (4, 6, 8, 10, 12, 16, 20):
        fro, nuc, scs, infeasible = [], [], [], 0
        for seed in range(args.seeds):
            X, Z, sel = make_data(seed, n, T, d)
            try:
                W_nuc = att_svm_w(X, Z, sel, norm="nuclear")
            except NotSeparableError:
                infeasible += 1
                continue
            nuc.append(numerical_rank(W_nuc))
            fro.append(numerical_rank(att_svm_w(X, Z, sel)))
            if args.scs:
                import cvxpy as cp

                W, _ = cvxpy_as_in_the_public_code(X, Z, sel, cp.SCS)
                scs.append(np.linalg.matrix_rank(W, tol=1e-7))
        line = (f"{d:>3} {infeasible:>10} {np.mean(fro) if fro else np.nan:>11.2f} "
                f"{np.mean(nuc) if nuc else np.nan:>11.2f}")
        if args.scs:
            line += f" {np.mean(scs) if scs else np.nan:>25.2f}"
        print(line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("speed", "rank"), required=True)
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--scs", action="store_true")
    args = parser.parse_args()
    if args.part == "speed":
        args.seeds = args.seeds or 5
        part_speed(args)
    else:
        args.seeds = args.seeds or 20
        part_rank(args)


if __name__ == "__main__":
    main()
