"""One gradient step of NTPDecoderClassifier on NumPy and torch, beside the bare products.

A GD step of the NTP cross-entropy (eq. (2)) costs two matrix products,
``L = H W^T`` (m x V) and ``G = L'^T H`` (V x d), plus a row-wise
max-shifted softmax over the logits and a sparse correction by the
next-token matrix.  This script times, in one run and on the same arrays:

* the two bare products alone (the floor of any implementation), and
* one full step (objective + update) of the shared objective
  ``skntp.losses.decoder.CrossEntropy`` (the code the estimator runs),

for each backend, and prints the ratio step / (product 1 + product 2).

Usage::

    python benchmarks/gd_step.py                       # m=4096, d=512, V=4096
    python benchmarks/gd_step.py --backends numpy torch --dtype float32
    python benchmarks/gd_step.py --core                # max-margin core, numpy vs torch
    python benchmarks/gd_step.py --large               # m=100000, d=256, V=30000 (minutes)

``--large`` fits ``NTPDecoderClassifier(max_iter=1, compute_limits=False)``
(validation, context aggregation, two chunked objective evaluations and
one GD step) in a fresh subprocess per backend and reports the wall time
and the process's peak resident memory (``resource.getrusage``) and, for
NumPy, the peak traced by ``tracemalloc``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

try:  # run from a checkout without installing
    import skntp  # noqa: F401
except ImportError:  # pragma: no cover
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _data(m, d, V, support=4, seed=0):
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((m, d))
    pi = np.full(m, 1.0 / m)
    cols = np.stack([rng.choice(V, size=support, replace=False) for _ in range(min(m, 64))])
    cols = cols[np.arange(m) % cols.shape[0]]  # distinct supports, cheap to draw
    vals = rng.dirichlet(np.ones(support), size=m)
    P = sp.csr_matrix((vals.ravel(), cols.ravel(), np.arange(0, m * support + 1, support)),
                      shape=(m, V))
    W = rng.standard_normal((V, d)) / np.sqrt(d)
    return H, pi, P, W


def _sync(be):
    if be.name == "torch" and be.device.type == "cuda":
        import torch

        torch.cuda.synchronize(be.device)


def _median_time(func, be, repeat):
    func()  # warm-up
    _sync(be)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        func()
        _sync(be)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def bench_step(backend, device, dtype, m, d, V, repeat):
    """Median seconds of the two bare products and of one GD step."""
    from skntp._backend import get_backend
    from skntp.losses.decoder import CrossEntropy

    be = get_backend(backend, device, dtype)
    H, pi, P, W = _data(m, d, V)
    objective = CrossEntropy(be, H, pi, P)
    Hb, Wb = be.asarray(H), be.asarray(W)
    L = Hb @ Wb.T

    def step():
        _, (g,) = objective((Wb,))
        return Wb - 0.5 * g

    t1 = _median_time(lambda: Hb @ Wb.T, be, repeat)
    t2 = _median_time(lambda: L.T @ Hb, be, repeat)
    ts = _median_time(step, be, repeat)
    flops = 2 * 2 * m * d * V
    return {"backend": backend if device is None else f"{backend}:{device}", "dtype": dtype,
            "m": m, "d": d, "V": V, "product_HWt_s": t1, "product_LtH_s": t2,
            "step_s": ts, "ratio": ts / (t1 + t2), "step_gflops": flops / ts / 1e9}


def bench_core(backend, device, dtype, m, d, V, repeat, method):
    """Median seconds of the NTP-SVM by the max-margin core on one backend."""
    import warnings

    from skntp._backend import get_backend
    from skntp.svm import ntp_svm_problem, solve_max_margin

    rng = np.random.default_rng(1)
    H = rng.standard_normal((m, d))
    support = rng.random((m, V)) < 0.2
    support[np.arange(m), rng.integers(0, V, m)] = True
    problem = ntp_svm_problem(H, support)
    kw = {"backend": backend, "device": device, "dtype": dtype, "method": method}
    if dtype == "float32":
        kw["tol"] = 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = solve_max_margin(problem, **kw)
        t = _median_time(lambda: solve_max_margin(problem, **kw),
                         get_backend(backend, device, dtype), repeat)
    return {"backend": backend, "dtype": dtype, "m": m, "d": d, "V": V,
            "n_constraints": len(problem.constraints), "method": res.method,
            "n_iter": res.n_iter, "seconds": t, "gap": res.gap,
            "max_violation": res.max_violation}


_LARGE = r"""
import json, resource, sys, time, tracemalloc
import numpy as np
backend, dtype, m, d, V, trace = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
from skntp import NTPDecoderClassifier
rng = np.random.default_rng(0)
X = rng.standard_normal((m, d))
y = rng.integers(0, V, m)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
if trace:
    tracemalloc.start()
t0 = time.perf_counter()
est = NTPDecoderClassifier(max_iter=1, compute_limits=False, vocabulary=V, backend=backend,
                           dtype=dtype, random_state=0).fit(X, y)
wall = time.perf_counter() - t0
traced = tracemalloc.get_traced_memory()[1] / 2**30 if trace else None
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
print(json.dumps({"backend": backend, "dtype": dtype, "m": m, "d": d, "V": V,
                  "fit_seconds": wall, "objective_calls": 2,
                  "peak_rss_gib": peak, "rss_before_fit_gib": base,
                  "tracemalloc_peak_gib": traced,
                  "loss": [float(v) for v in est.history_["loss"]]}))
"""


def bench_large(backend, dtype, m, d, V):
    out = subprocess.run(
        [sys.executable, "-c", _LARGE, backend, dtype, str(m), str(d), str(V),
         "1" if backend == "numpy" else "0"],
        capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--m", type=int, default=4096)
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--V", type=int, default=4096)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--backends", nargs="+", default=["numpy", "torch"])
    ap.add_argument("--device", default=None, help="torch device, e.g. cuda")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--core", action="store_true", help="time the max-margin core too")
    ap.add_argument("--core-method", default="auto")
    ap.add_argument("--large", action="store_true",
                    help="also the m=100000, d=256, V=30000 step with peak memory")
    ap.add_argument("--json", action="store_true", help="print JSON lines only")
    ap.add_argument("--threads", type=int, default=None,
                    help="limit BLAS/OpenMP threads (NumPy and torch) to this many")
    args = ap.parse_args(argv)
    if args.threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.threads)
        if "torch" in args.backends:
            import torch

            torch.set_num_threads(args.threads)
    rows = []
    for backend in args.backends:
        dev = args.device if backend == "torch" else None
        r = bench_step(backend, dev, args.dtype, args.m, args.d, args.V, args.repeat)
        rows.append(r)
        if not args.json:
            print(f"{r['backend']:>10} {r['dtype']}  m={r['m']} d={r['d']} V={r['V']}:  "
                  f"H@W.T {r['product_HWt_s'] * 1e3:8.1f} ms   L.T@H "
                  f"{r['product_LtH_s'] * 1e3:8.1f} ms   GD step {r['step_s'] * 1e3:8.1f} ms"
                  f"   step/products = {r['ratio']:.2f}   ({r['step_gflops']:.0f} GFLOP/s)")
    if args.core:
        runs = [(b, args.core_method) for b in args.backends] + [("numpy", "cvxpy")]
        for backend, method in runs:
            dev = args.device if backend == "torch" else None
            r = bench_core(backend, dev, args.dtype, 60, 120, 30, max(1, args.repeat // 2),
                           method)
            rows.append(r)
            if not args.json:
                print(f"{backend:>10} {r['dtype']}  NTP-SVM m={r['m']} d={r['d']} V={r['V']} "
                      f"({r['n_constraints']} constraints): {r['method']} "
                      f"{r['seconds'] * 1e3:8.1f} ms, {r['n_iter']} iterations, "
                      f"gap {r['gap']:.1e}")
    if args.large:
        for backend in args.backends:
            r = bench_large(backend, args.dtype, 100_000, 256, 30_000)
            rows.append(r)
            if not args.json:
                traced = ("" if r["tracemalloc_peak_gib"] is None
                          else f", tracemalloc peak {r['tracemalloc_peak_gib']:.2f} GiB")
                print(f"{backend:>10} {r['dtype']}  large m={r['m']} d={r['d']} V={r['V']}: "
                      f"fit(max_iter=1) {r['fit_seconds']:.1f} s for 2 objective calls + "
                      f"1 step; peak RSS {r['peak_rss_gib']:.2f} GiB "
                      f"(before fit {r['rss_before_fit_gib']:.2f}){traced}")
    if args.json:
        for r in rows:
            print(json.dumps(r))
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    if not args.json:
        print(f"(this process: peak RSS {usage:.2f} GiB)")
    return rows


if __name__ == "__main__":
    main()
