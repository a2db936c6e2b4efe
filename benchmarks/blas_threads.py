"""Benchmark: the cost of limiting BLAS threads around a loop of small solves.

``skntp._backend.blas_threads`` limits the BLAS pool to one thread around a loop of
small products (``threadpoolctl``, as scikit-learn does).  A ``threadpool_limits(...)``
made on each entry walks every shared library of the process; the package keeps one
``ThreadpoolController`` until ``sys.modules`` grows.  This prints, in the same run:

1. the time of one entry and exit of the context, made fresh (the reference, what
   ``threadpool_limits(limits=1, user_api="blas")`` costs) and from the kept controller;
2. the workload that showed it: the relu-head limit of ``AttentionSelector``, whose
   ``att_svm_prime`` solves one small SVM per candidate set of kept tokens (about a
   thousand solves a fit, on scikit-learn's ``check_classifiers_train`` data), timed
   with the fresh context and with the kept one.

Usage::

    python benchmarks/blas_threads.py [--busy] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np
from threadpoolctl import threadpool_limits

import skntp._backend as backend
from skntp import KeyQuerySelector


def _fresh():
    return threadpool_limits(limits=1, user_api="blas")


def _entry_time(n=200):
    t = time.perf_counter()
    for _ in range(n):
        with backend.blas_threads(1000):
            pass
    return (time.perf_counter() - t) / n


def _relu_data():
    # scikit-learn's check_classifiers_train data, where the slowdown was found: 200
    # standardized 2-D blobs of two classes (each row one input of two tokens of d = 1)
    from sklearn.datasets import make_blobs
    from sklearn.preprocessing import StandardScaler

    X, y = make_blobs(n_samples=300, random_state=0)
    X = StandardScaler().fit_transform(X)
    return X[y != 2], y[y != 2]


def _fit_time(X, y):
    est = KeyQuerySelector(activation="relu", max_iter=30, random_state=0)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return time.perf_counter() - t, est


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--busy", action="store_true",
                        help="run next to a busy process (two threads of 700 x 700 "
                        "matrix products, as in benchmarks/scaling.py)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    busy = None
    if args.busy:
        import subprocess

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from scaling import BUSY

        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        time.sleep(2.0)
    try:
        print(f"load before {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores"
              + (", next to a busy process" if busy else ""))
        X, y = _relu_data()
        kept = backend._one_blas_thread
        rows = {}
        for label, context in (("fresh threadpool_limits (reference)", _fresh),
                               ("kept controller (skntp)", kept)):
            backend._one_blas_thread = context
            try:
                _fit_time(X, y)  # warm-up: imports, first controller
                entry = min(_entry_time() for _ in range(args.repeats))
                fits = [_fit_time(X, y) for _ in range(args.repeats)]
            finally:
                backend._one_blas_thread = kept
            rows[label] = (entry, min(t for t, _ in fits), fits[-1][1])
        for label, (entry, fit, _) in rows.items():
            print(f"{label:38s} one entry {entry * 1e3:7.3f} ms   relu-head fit {fit:7.2f} s")
        (e0, f0, a), (e1, f1, b) = rows.values()
        same = np.allclose(a.mm_direction_, b.mm_direction_) if a.mm_direction_ is not None \
            else b.mm_direction_ is None
        print(f"speed-up: one entry {e0 / e1:.0f}x, the fit {f0 / f1:.1f}x; same limit: {same}")
        print(f"load after {os.getloadavg()[0]:.2f}")
    finally:
        if busy is not None:
            busy.kill()
            busy.wait()


if __name__ == "__main__":
    main()
