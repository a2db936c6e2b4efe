"""The separability diagnosis and the limits of data that are not NTP-separable (#37).

Real text (Python's help topics, ``load_text_ntp(corpus="python",
embedding="words")``, ``d << m``) and planted partly separable data.  For each
instance: the time of :func:`skntp.svm.ntp_separability` (the rank, the spanning
contexts, the stationary point, then the LP), of ``W^mm_I`` and of ``W_fin`` (in a
subprocess capped by ``--fin-cap`` seconds); and, in the same run, the references:
the LP alone (HiGHS) where its size allows, and ``ntp_svm`` until it declares the data
not separable (capped by ``--svm-cap`` seconds; it refuses at once where the spanning
contexts prove that no row separates).  Usage::

    python benchmarks/ntp_separability.py [--large | --only-large] [--svm-cap 120]
        [--fin-cap 900]
    python benchmarks/ntp_separability.py --newton
    python benchmarks/ntp_separability.py --preconditioner [--plain-products 1000] [--busy]

The default set ends with the issue's example (1,000 sentences, every word a token,
d = 128: 3,918 distinct contexts).  ``--large`` adds the real text at m = 8,401
(d = 128) and at m = 18,535 (four-word contexts, d = 128).  Prints one row per instance
and the machine's load.  ``--newton`` times ``W_fin`` by the package's Newton-CG
against scipy's trust-krylov on the 300-word text instead; ``--preconditioner`` times
``W_fin`` of the issue's example with CG preconditioned by the Hessian's per-token
blocks, the same without the minimization along the Newton step, plain CG (capped in
products), and the estimator's whole fit (``--busy``: next to a process that keeps every
core busy).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import numpy as np
import scipy.optimize

from skntp.datasets import load_text_ntp
from skntp.decoder import aggregate_contexts
from skntp.losses.decoder import next_token_targets
from skntp.svm import (
    NotSeparableError,
    ProgramTooLargeError,
    _ntp_partial,
    ntp_separability,
    ntp_svm,
    partial_finite_component,
    partial_ntp_svm_problem,
    solve_max_margin,
)


def _distinct(X, y):
    _, Y = next_token_targets(y, len(y), None)
    H, pi, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    return H, pi, P.toarray()


def _text(n_words, n_features, context_size=2):
    b = load_text_ntp(corpus="python", n_words=n_words, embedding="words",
                      n_features=n_features, context_size=context_size)
    return (f"python text, {n_words} words, {context_size}-word contexts, "
            f"d={context_size * n_features}", *_distinct(b.data, b.target))


def _issue_example():
    """The example of the issue: the first 1,000 sentences of Python's help topics,
    every word a token, a random 64-dimensional vector per word, the last two words
    concatenated (7,404 prefixes, d = 128)."""
    b = load_text_ntp(corpus="python", n_sentences=1000, n_words=10**6, embedding="words",
                      n_features=64)
    return f"python text, 1,000 sentences, {len(b.target)} prefixes, d=128", *_distinct(
        b.data, b.target)


def _planted(seed, groups):
    """``groups`` blocks of (3 contexts on 4 own coordinates: separable) and (25
    contexts on 2: not), every context with a bias coordinate 1."""
    rng = np.random.default_rng(seed)
    blocks, supports = [], []
    d = 1 + 6 * groups
    V = 6 * groups + 1
    for g in range(groups):
        for m_g, lo, width, tokens in ((3, 1 + 6 * g, 4, 3 * 2 * g + np.arange(3)),
                                       (25, 5 + 6 * g, 2, 3 * (2 * g + 1) + np.arange(3))):
            h = np.zeros((m_g, d))
            h[:, 0] = 1
            h[:, lo:lo + width] = rng.standard_normal((m_g, width))
            blocks.append(h)
            for _ in range(m_g):
                p = np.zeros(V)
                k = int(rng.integers(1, 3))
                p[rng.choice(tokens, k, replace=False)] = rng.dirichlet(np.ones(k))
                supports.append(p)
    H = np.vstack(blocks)
    return f"planted, {groups} groups", H, np.full(len(H), 1 / len(H)), np.array(supports)


def _svm_until_refused(H, S, queue):
    t = time.perf_counter()
    try:
        ntp_svm(H, S)
        queue.put(("separable", time.perf_counter() - t))
    except NotSeparableError:
        queue.put(("not separable", time.perf_counter() - t))


def _in_subprocess(target, args, cap):
    """``target(*args, queue)`` in a subprocess, stopped after ``cap`` seconds (None then)."""
    queue = multiprocessing.Queue()
    proc = multiprocessing.Process(target=target, args=(*args, queue))
    proc.start()
    proc.join(cap)
    if proc.is_alive():
        proc.terminate()
        return None
    return queue.get()


def _finite(H, P, sep, pi, queue):
    t = time.perf_counter()
    fin = partial_finite_component(H, P, sep, pi)
    queue.put((time.perf_counter() - t, fin.converged, fin.n_iter, fin.grad_norm))


def _newton_against_scipy():
    """``W_fin`` by the package's Newton-CG and by scipy's trust-krylov (same loss,
    gradient and Hessian products, gradient-norm stop) on the 300-word text."""
    name, H, pi, P = _text(300, 16)
    sep = ntp_separability(H, P > 0)
    t = time.perf_counter()
    ours = partial_finite_component(H, P, sep, pi, max_products=None)
    t_ours = time.perf_counter() - t
    calls = {}

    def trust_krylov(fun, hess_at, x, gtol, max_iter, cg_iter=200, report=None,
                     max_products=None, *unused):  # scipy's method takes no preconditioner
        def hessp(x, p):
            if calls.get("x") is None or not np.array_equal(calls["x"], x):
                calls["x"], calls["product"] = x.copy(), hess_at(x)
            return calls["product"](p)
        res = scipy.optimize.minimize(fun, x, jac=True, hessp=hessp, method="trust-krylov",
                                      options={"gtol": gtol, "maxiter": max_iter})
        return res.x, res.nit

    original = _ntp_partial.newton_cg
    _ntp_partial.newton_cg = trust_krylov
    try:
        t = time.perf_counter()
        theirs = partial_finite_component(H, P, sep, pi, max_products=None)
        t_theirs = time.perf_counter() - t
    finally:
        _ntp_partial.newton_cg = original
    print(f"W_fin on {name} (m={H.shape[0]}, V={P.shape[1]}), load {os.getloadavg()}")
    for label, fin, seconds in (("newton_cg", ours, t_ours),
                                ("scipy trust-krylov", theirs, t_theirs)):
        print(f"  {label}: {seconds:.1f} s, {fin.n_iter} iterations, relative gradient "
              f"{fin.grad_norm:.1e}, converged {fin.converged}")


def _busy():
    """A busy neighbour: BLAS products on every core until terminated."""
    a = np.random.default_rng(0).standard_normal((1500, 1500))
    while True:
        a = np.tanh(a @ a)


def _preconditioned_against_plain(plain_products, busy=False):
    """``W_fin`` on the issue's example (3,918 contexts, V = 1,066, d = 128, no row
    separable) with CG preconditioned by the Hessian's per-token blocks; the same with
    the Newton step only halved (no minimization along it: the reference of the line
    search); with plain CG (no blocks: the memory check told that none fit) up to
    ``plain_products`` Hessian products; then the estimator as a user runs it.
    ``busy``: all of it next to a process that keeps every core busy."""
    from skntp import NTPDecoderClassifier

    neighbour = None
    if busy:
        neighbour = multiprocessing.get_context("spawn").Process(target=_busy, daemon=True)
        neighbour.start()
    name, H, pi, P = _issue_example()
    sep = ntp_separability(H, P > 0)
    print(f"W_fin on {name} (m={H.shape[0]}, V={P.shape[1]}, d={H.shape[1]}), "
          f"{'next to a busy process, ' if busy else ''}load before {os.getloadavg()}")
    t = time.perf_counter()
    fin = partial_finite_component(H, P, sep, pi, max_products=None)
    print(f"  preconditioned: {time.perf_counter() - t:.1f} s, {fin.n_iter} Newton steps, "
          f"relative gradient {fin.grad_norm:.1e}, converged {fin.converged}, loss "
          f"{fin.loss:.10f}", flush=True)
    original = _ntp_partial.newton_cg
    _ntp_partial.newton_cg = lambda *args: original(*args[:-1])  # drop line_at
    try:
        t = time.perf_counter()
        halved = partial_finite_component(H, P, sep, pi, max_products=None)
    finally:
        _ntp_partial.newton_cg = original
    print(f"  preconditioned, step halving only: {time.perf_counter() - t:.1f} s, "
          f"{halved.n_iter} Newton steps, relative gradient {halved.grad_norm:.1e}, "
          f"converged {halved.converged}, loss {halved.loss:.10f}", flush=True)
    original = _ntp_partial.available_memory
    _ntp_partial.available_memory = lambda: 0.0
    try:
        t = time.perf_counter()
        plain = partial_finite_component(H, P, sep, pi, max_products=plain_products)
    finally:
        _ntp_partial.available_memory = original
    print(f"  plain CG, {plain_products} products: {time.perf_counter() - t:.1f} s, "
          f"{plain.n_iter} Newton steps, relative gradient {plain.grad_norm:.1e}, converged "
          f"{plain.converged}, loss {plain.loss:.10f}", flush=True)
    X, y = load_text_ntp(corpus="python", n_sentences=1000, n_words=10**6, embedding="words",
                         n_features=64, return_X_y=True)
    t = time.perf_counter()
    est = NTPDecoderClassifier(solver="svm").fit(X, y)
    print(f"  NTPDecoderClassifier(solver='svm').fit: {time.perf_counter() - t:.1f} s "
          f"(diagnosis and both limits), separable fraction {est.separable_fraction_}, "
          f"loss_infimum_ {est.loss_infimum_:.10f}; load after {os.getloadavg()}")
    if neighbour is not None:
        neighbour.terminate()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--large", action="store_true", help="add the two large texts")
    parser.add_argument("--only-large", action="store_true", help="the two large texts alone")
    parser.add_argument("--newton", action="store_true",
                        help="only W_fin by Newton-CG against scipy's trust-krylov")
    parser.add_argument("--preconditioner", action="store_true",
                        help="only W_fin of the issue's example, preconditioned against "
                             "plain CG, and the estimator's fit")
    parser.add_argument("--plain-products", type=int, default=1000)
    parser.add_argument("--busy", action="store_true",
                        help="--preconditioner next to a process that keeps every core busy")
    parser.add_argument("--svm-cap", type=float, default=120.0)
    parser.add_argument("--fin-cap", type=float, default=900.0)
    args = parser.parse_args()
    if args.newton:
        _newton_against_scipy()
        return
    if args.preconditioner:
        _preconditioned_against_plain(args.plain_products, args.busy)
        return
    instances = [] if args.only_large else [
        _text(30, 4), _text(60, 4), _text(20, 14), _planted(0, 4), _planted(1, 8),
        _text(300, 16), _issue_example()]
    if args.large or args.only_large:
        instances += [_text(1000, 64), _text(2000, 32, context_size=4)]
    print(f"load average before: {os.getloadavg()}")
    header = ("instance", "m", "V", "d", "method", "fraction", "diagnosis s",
              "W^mm_I s", "W_fin s", "LP alone s", "ntp_svm")
    print(" | ".join(header))
    for name, H, pi, P in instances:
        S = P > 0
        t = time.perf_counter()
        try:
            sep = ntp_separability(H, S)
        except ProgramTooLargeError as exc:
            print(" | ".join([name, str(H.shape[0]), str(S.shape[1]), str(H.shape[1]),
                              f"refused after {time.perf_counter() - t:.2f} s: {exc}"]))
            continue
        t_diag = time.perf_counter() - t
        t = time.perf_counter()
        res = (solve_max_margin(partial_ntp_svm_problem(H, sep)) if sep.n_separable
               and not sep.is_separable else None)
        t_mm = time.perf_counter() - t
        assert res is None or res.status == "optimal"
        fin = _in_subprocess(_finite, (H, P, sep, pi), args.fin_cap)
        if fin is None:
            t_fin = f"not done in {args.fin_cap:.0f} s"
        elif fin[1]:
            t_fin = f"{fin[0]:.2f} ({fin[2]} Newton steps)"
        else:
            t_fin = (f"{fin[0]:.2f}, budget spent ({fin[2]} Newton steps, relative "
                     f"gradient {fin[3]:.1e})")
        lp = "-"
        if sep.method in ("positive spanning", "stationary point") and (
                S.size - S.sum() <= 20_000):
            t = time.perf_counter()
            assert ntp_separability(H, S, method="highs").n_separable == 0
            lp = f"{time.perf_counter() - t:.2f}"
        elif sep.method == "highs":
            lp = f"{t_diag:.2f} (is the diagnosis)"
        elif sep.method != "rank":
            lp = f"({S.size - S.sum():,} rows: refused)"
        svm = _in_subprocess(_svm_until_refused, (H, S), args.svm_cap)
        ref = (f"no answer in {args.svm_cap:.0f} s" if svm is None
               else f"{svm[0]} after {svm[1]:.1f} s")
        print(" | ".join([name, str(H.shape[0]), str(S.shape[1]), str(H.shape[1]), sep.method,
                          f"{sep.fraction:.3f}", f"{t_diag:.2f}", f"{t_mm:.2f}", t_fin, lp,
                          ref]), flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
