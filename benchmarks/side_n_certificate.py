"""The side ``N`` of a split certified on the Python documentation at d = 768.

:func:`skntp.svm.far_point_split` holds rows not separable and certifies them, with
the supports, by a Farkas table.  Here the held rows are those the package certifies on
this corpus by their structure (the cycles and the label program's rows), and two
tables are tried on them, as ``far_point_split`` tries them:

* the loss (2) restricted to the supports and the held rows, by Newton-CG, its loss
  entry by entry (:class:`skntp.svm._ntp_sparse.SparseRestrictedLoss`; a Hessian
  product is timed both ways, the reference over ``(m, V)`` tables in the same run);
* the analytic center of the held rows' polytope (:func:`skntp.svm.analytic_center_of_rows`).

Printed: each one's Newton steps, gradients and time, the rows its table certifies, and
the peak resident memory.

Run::

    python benchmarks/side_n_certificate.py [--case python-768] [--max-iter 100]
    [--extra ROWS.npy]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))


def _timed(f, repeat=3):
    f()
    start = time.perf_counter()
    for _ in range(repeat):
        f()
    return (time.perf_counter() - start) / repeat


def _dense_reference(dense, w, u, product):
    """The time of a Hessian product over (m, V) tables, and its largest difference
    from ``product``; the tables are freed on return."""
    dense.value_and_gradient(w)
    return (_timed(lambda: dense.hessian_at(w)(u)),
            float(np.abs(dense.hessian_at(w)(u) - product).max()))


def main():
    from corpus_scale import _contexts_and_supports

    from skntp.svm import (
        analytic_center_of_rows,
        check_cycle_certificate,
        check_label_certificate,
        cycle_certificate,
        label_certificate,
        orthonormal_contexts,
    )
    from skntp.svm._newton import GradientStall
    from skntp.svm._ntp_partial import (
        _loss_table,
        _power_of_two_scale,
        _refutation_margin,
        _refuted_rows,
        _restricted_newton,
        _RestrictedLoss,
        _span_uncertainty,
        image_vanishes,
    )
    from skntp.svm._ntp_sparse import SparseRestrictedLoss

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="python-768")
    parser.add_argument("--max-iter", type=int, default=100)
    parser.add_argument("--extra", help="a saved (m, V) mask of more rows to hold")
    args = parser.parse_args()
    H, S = _contexts_and_supports(args.case)
    m, V = S.shape
    cycles = check_cycle_certificate(H, S, cycle_certificate(H, S))
    labels = check_label_certificate(H, S, label_certificate(H, S, equal=cycles),
                                     equal=cycles)
    held = (cycles | labels) & ~S
    if args.extra:
        held |= np.load(args.extra) & ~S
    allowed = S | held
    Hs = H / _power_of_two_scale(H)
    Q, cond = orthonormal_contexts(Hs, return_condition=True)
    blur = _span_uncertainty(Q, cond)
    r = Q.shape[1]
    Pn = S / S.sum(axis=1, keepdims=True)
    pi = np.full(m, 1.0 / m)
    extra = f" and {args.extra}" if args.extra else ""
    print(f"{args.case}: {m} contexts, V = {V}, rank {r}; side N: {int(held.sum())} rows "
          f"held (cycles and labels{extra}), {int(allowed.sum())} allowed entries "
          f"({allowed.mean():.2%} of m V); load {os.getloadavg()[0]:.2f}")
    rng = np.random.default_rng(0)
    w, u = 0.1 * rng.standard_normal(V * r), rng.standard_normal(V * r)
    sparse = SparseRestrictedLoss(Q, Pn, pi, allowed)
    sparse.value_and_gradient(w)
    t_sparse = _timed(lambda: sparse.hessian_at(w)(u))
    t_dense, gap = _dense_reference(_RestrictedLoss(Q, Pn, pi, allowed), w, u,
                                    sparse.hessian_at(w)(u))
    print(f"  a Hessian product: entry by entry {1e3 * t_sparse:8.1f} ms; reference, over "
          f"(m, V) tables {1e3 * t_dense:8.1f} ms ({t_dense / t_sparse:.0f} times); the "
          f"two differ by {gap:.1e}")
    stall = GradientStall()
    trace = []

    def report(k, g, w):
        trace.append((k, g, time.perf_counter() - start))
        if stall(g):
            raise StopIteration

    start = time.perf_counter()
    loss, w, n_iter = _restricted_newton(Q, Pn, pi, allowed, tol=1e-13,
                                         max_iter=args.max_iter, cg_iter=200,
                                         max_products=None, report=report)
    took = time.perf_counter() - start
    scale = float(np.max(np.linalg.norm(Q, axis=1)))
    grad = float(np.linalg.norm(loss.value_and_gradient(w)[1])) / scale
    s = loss.s[~S[loss.j, loss.v]]
    print(f"  Newton-CG of the side N entry by entry: {n_iter} steps, {took:.1f} s, "
          f"relative gradient {trace[0][1] / scale:.1e} -> {grad:.1e}; smallest held "
          f"probability {s.min():.1e}; {'stalled' if stall.flat >= stall.patience else ''}")
    for k, g, t in trace[:: max(1, len(trace) // 8)]:
        print(f"    step {k:3d}  gradient {g / scale:.2e}  {t:7.1f} s")
    T = _loss_table(Q @ w.reshape(V, r).T, Pn, pi, Q, allowed)
    certified = 0
    if image_vanishes(Hs, S, T):
        certified = int((held & _refuted_rows(Q, S, T, _refutation_margin(blur),
                                              blur)).sum())
    print(f"  its table certifies {certified} of the {int(held.sum())} held rows")
    steps = []
    start = time.perf_counter()
    table = analytic_center_of_rows(H, S, held, callback=lambda k, g, _: steps.append(
        (k, g, time.perf_counter() - start)))
    took = time.perf_counter() - start
    for k, g, t in steps[:: max(1, len(steps) // 8)] + steps[-1:]:
        print(f"    step {k:3d}  gradient {g:.2e}  {t:7.1f} s")
    certified = 0 if table is None else int(np.count_nonzero(held & (table < 0)))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"  the analytic center of the held rows: {len(steps) - 1} Newton steps, "
          f"{took:.1f} s, {'certifies every one' if table is not None else 'not certified'}"
          f" ({certified} rows); peak RSS {peak:.2f} GiB, load {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
