"""W_fin's products word by word against the dense products (#49).

On the Python documentation at d = 768 (two-word contexts of 384-dimensional word
vectors: m = 11,071, V = 2,128) the loss's products with the contexts run word by word
(``skntp.svm._ntp_contexts``); the reference, in the same run, is the dense products
the loss ran before.  It times, after one warm-up call each: the value and gradient, a
Hessian product in double and in single precision, and ``partial_finite_component``
over every row for ``--steps`` Newton steps (its relative gradient and the largest
difference of the two ``W``).  The load average is printed before and after.
Usage::

    python benchmarks/factored_contexts.py [--steps 6] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import scipy.sparse as sp


def _load():
    from corpus_scale import _load as load_case

    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets

    X, y = load_case("python-768")
    _, Y = next_token_targets(y, len(y), None)
    H, weights, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    return H, sp.csr_matrix(P), weights


def _timed(f, repeat):
    f()
    start = time.perf_counter()
    for _ in range(repeat):
        f()
    return (time.perf_counter() - start) / repeat


def _products(H, P, pi, support, w, v, repeat):
    """(setup, value and gradient, Hessian product in float64, in float32), seconds."""
    from skntp.svm._ntp_partial import _RestrictedLoss

    start = time.perf_counter()
    loss = _RestrictedLoss(H, P, pi, np.ones_like(support))
    setup = time.perf_counter() - start
    grad = _timed(lambda: loss.value_and_gradient(w), repeat)
    double = loss.hessian_at(w)
    t64 = _timed(lambda: double(v), repeat)
    single = loss.hessian_at(w, single=True)
    return setup, grad, t64, _timed(lambda: single(v), repeat)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from skntp.svm import NTPSeparability, _ntp_partial, partial_finite_component
    from skntp.svm._ntp_partial import _power_of_two_scale, support_mask

    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} cores")
    H, P, weights = _load()
    support = support_mask(P)
    m, V = support.shape
    print(f"python-768: m = {m}, V = {V}, d = {H.shape[1]}")
    Pn = sp.csr_matrix(sp.diags(1.0 / np.asarray(P.sum(axis=1)).ravel()) @ P)
    pi = weights / weights.sum()
    Hs = H / _power_of_two_scale(H)
    rng = np.random.default_rng(0)
    w, v = 0.1 * rng.standard_normal(V * H.shape[1]), rng.standard_normal(V * H.shape[1])
    factor = _ntp_partial.word_blocks
    rows = {}
    for name, blocks in (("dense (reference)", lambda H: None), ("word by word", factor)):
        _ntp_partial.word_blocks = blocks
        try:
            setup, grad, t64, t32 = _products(Hs, Pn, pi, support, w, v, args.repeat)
            everything = NTPSeparability(np.zeros_like(support), support, "stationary point")
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (not converged: a fixed number of steps)
                fin = partial_finite_component(H, P, everything, weights,
                                               max_iter=args.steps)
            newton = time.perf_counter() - start
        finally:
            _ntp_partial.word_blocks = factor
        rows[name] = fin.W
        print(f"{name:18s} setup {setup:6.2f} s | value+gradient {grad:6.3f} s | Hessian "
              f"product {t64:6.3f} s (float64), {t32:6.3f} s (float32) | W_fin, "
              f"{fin.n_iter} Newton steps: {newton:7.1f} s, relative gradient "
              f"{fin.grad_norm:.3g}", flush=True)
    a, b = rows.values()
    print(f"largest difference of the two W_fin: {np.abs(a - b).max() / np.abs(a).max():.2g} "
          "of the largest entry")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
