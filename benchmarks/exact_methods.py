"""The exact home-made methods against the library path (cvxpy with Clarabel), same run.

``graph-ldp`` (Graph-SVM), ``dual-active-set`` and ``nnls`` (key-score programs: the
ATT-SVM and the head SVM) against ``method="cvxpy"`` on the same programs, each
answer certified by :func:`skntp.svm.solve_max_margin`.  Usage::

    python benchmarks/exact_methods.py [--repeat 3] [--seed 0]

Prints, per program, the median wall time of each method over ``--repeat`` runs, its
certificate (relative gap, violation) and the ratio to cvxpy, and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from skntp.datasets import make_token_priority_data
from skntp.graphs import token_priority_graphs
from skntp.svm import att_svm_problem, graph_svm_problem, head_svm_problem, solve_max_margin


def _programs(seed):
    rng = np.random.default_rng(seed)
    out = []
    for K, d, n in ((12, 16, 30), (30, 40, 200)):
        X, y, E = make_token_priority_data(K, d, n, 6, acyclic=False, random_state=seed)
        problem = graph_svm_problem(E, token_priority_graphs(X, y))
        out.append((f"Graph-SVM K={K} d={d} n={n}", problem, "graph-ldp"))
    for n, T, d in ((200, 8, 16), (1000, 16, 64)):
        keys = rng.standard_normal((n, T, d))
        sel = np.argmax(keys @ rng.standard_normal(d), axis=1)
        problem = att_svm_problem(keys, sel)
        out.append((f"ATT-SVM n={n} T={T} d={d}", problem, "dual-active-set"))
        out.append((f"ATT-SVM n={n} T={T} d={d}", problem, "nnls"))
    R = rng.standard_normal((1000, 64))
    y = np.sign(R @ rng.standard_normal(64))
    out.append(("head SVM n=1000 d=64", head_svm_problem(R, y), "dual-active-set"))
    out.append(("head SVM n=1000 d=64", head_svm_problem(R, y), "nnls"))
    return out


def _time(problem, method, repeat):
    times, res = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = solve_max_margin(problem, method=method)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), res


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(f"load average at start: {os.getloadavg()[0]:.2f}")
    print(f"{'program':32s} {'method':16s} {'time':>9s} {'gap':>9s} {'viol':>9s} "
          f"{'cvxpy':>9s} {'gap':>9s} {'ratio':>7s}")
    for name, problem, method in _programs(args.seed):
        t_ours, ours = _time(problem, method, args.repeat)
        t_ref, ref = _time(problem, "cvxpy", args.repeat)
        print(f"{name:32s} {method:16s} {t_ours:9.4f} {ours.gap:9.1e} "
              f"{ours.max_violation:9.1e} {t_ref:9.4f} {ref.gap:9.1e} {t_ref / t_ours:6.1f}x"
              f"  ({ours.status}; cvxpy {ref.status})")
    print(f"load average at end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
