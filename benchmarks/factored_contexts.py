"""The NTP loss's products word by word against the dense products (#49).

On the Python documentation at d = 768 (two-word contexts of 384-dimensional word
vectors: m = 11,071, V = 2,128) the loss's products with the contexts run word by word
(``skntp.losses._contexts``); the reference, in the same run, is the dense products
the losses ran before.  It times, after one warm-up call each:

* ``W_fin``'s loss: the value and gradient, a Hessian product in double and in single
  precision, and ``partial_finite_component`` over every row for ``--steps`` Newton
  steps (its relative gradient and the largest difference of the two ``W``);
* gradient descent's loss (``CrossEntropy``, eq. (2)): the value and gradient on
  NumPy and on CPU torch, and ``NTPDecoderClassifier(solver="gd")`` for
  ``--gd-steps`` steps without the limits (the largest difference of the two
  ``coef_``).

The load average is printed before and after.  Usage::

    python benchmarks/factored_contexts.py [--steps 6] [--gd-steps 50] [--repeat 3]
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


def _descent(H, P, weights, X, y, steps, repeat):
    """(value and gradient on NumPy, on CPU torch or None, GD fit, its coef_)."""
    from skntp import NTPDecoderClassifier
    from skntp._backend import get_backend
    from skntp.losses.decoder import CrossEntropy

    pi = weights / weights.sum()
    rng = np.random.default_rng(1)
    W = 0.1 * rng.standard_normal((P.shape[1], H.shape[1]))
    ce = CrossEntropy(get_backend(), H, pi, P)
    numpy_time = _timed(lambda: ce((W,)), repeat)
    try:
        be = get_backend("torch")
    except ImportError:
        torch_time = None
    else:
        ce = CrossEntropy(be, H, pi, P)
        Wt = be.asarray(W)
        torch_time = _timed(lambda: ce((Wt,)), repeat)
    gd = NTPDecoderClassifier(solver="gd", max_iter=steps, compute_limits=False,
                              random_state=0)
    start = time.perf_counter()
    gd.fit(X, y)
    return numpy_time, torch_time, time.perf_counter() - start, gd.coef_


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--gd-steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from corpus_scale import _load as load_case

    from skntp.losses import _contexts
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
    X, y = load_case("python-768")
    for name, blocks in (("dense (reference)", lambda H: None), ("word by word", factor)):
        _contexts.word_blocks = blocks
        try:
            t_np, t_torch, fit, coef = _descent(H, P, weights, X, y, args.gd_steps,
                                                args.repeat)
        finally:
            _contexts.word_blocks = factor
        rows[name] = coef
        torch_text = "no torch" if t_torch is None else f"{t_torch:6.3f} s (CPU torch)"
        print(f"{name:18s} CrossEntropy value+gradient {t_np:6.3f} s (NumPy), {torch_text} "
              f"| NTPDecoderClassifier(solver='gd'), {args.gd_steps} steps: {fit:6.1f} s",
              flush=True)
    a, b = rows["dense (reference)"], rows["word by word"]
    print(f"largest difference of the two coef_: {np.abs(a - b).max() / np.abs(a).max():.2g} "
          "of the largest entry")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
