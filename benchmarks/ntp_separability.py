"""The separability diagnosis and the limits of data that are not NTP-separable (#37).

Real text (Python's help topics, ``load_text_ntp(corpus="python",
embedding="words")``, ``d << m``) and planted partly separable data.  For each
instance: the time of :func:`skntp.svm.ntp_separability` (which tries the
stationary-point proof, then the LP), of ``W^mm_I`` and of ``W_fin``; and, in the
same run, the references: the LP alone (HiGHS) where its size allows, and the
NTP-SVM solve (``ntp_svm``), the only answer the package had before, until it
declares the data not separable (capped by ``--svm-cap`` seconds).  Usage::

    python benchmarks/ntp_separability.py [--large] [--svm-cap 120]

``--large`` adds the real text at m = 8,401 (d = 128), which both the proof's and the
LP's size limits refuse (the row says so).  Prints one row per
instance and the machine's load.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import time

import numpy as np

from skntp.datasets import load_text_ntp
from skntp.decoder import aggregate_contexts
from skntp.losses.decoder import next_token_targets
from skntp.svm import (
    NotSeparableError,
    ProgramTooLargeError,
    ntp_separability,
    ntp_svm,
    partial_finite_component,
    partial_ntp_svm_problem,
    solve_max_margin,
)


def _text(n_words, n_features):
    b = load_text_ntp(corpus="python", n_words=n_words, embedding="words",
                      n_features=n_features)
    _, Y = next_token_targets(b.target, len(b.target), None)
    H, pi, P, _ = aggregate_contexts(b.data, Y, np.ones(len(b.target)))
    return f"python text, {n_words} words, d={H.shape[1]}", H, pi, P.toarray()


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


def _reference_svm(H, S, cap):
    queue = multiprocessing.Queue()
    proc = multiprocessing.Process(target=_svm_until_refused, args=(H, S, queue))
    proc.start()
    proc.join(cap)
    if proc.is_alive():
        proc.terminate()
        return f"no answer in {cap:.0f} s"
    verdict, seconds = queue.get()
    return f"{verdict} after {seconds:.1f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--large", action="store_true")
    parser.add_argument("--svm-cap", type=float, default=120.0)
    args = parser.parse_args()
    instances = [_text(30, 4), _text(60, 4), _text(20, 14), _planted(0, 4), _planted(1, 8),
                 _text(300, 16)]
    if args.large:
        instances.append(_text(1000, 64))
    print(f"load average before: {os.getloadavg()}")
    header = ("instance", "m", "V", "d", "method", "fraction", "diagnosis s",
              "W^mm_I s", "W_fin s", "LP alone s", "NTP-SVM alone")
    print(" | ".join(header))
    for name, H, pi, P in instances:
        S = P > 0
        t = time.perf_counter()
        try:
            sep = ntp_separability(H, S)
        except ProgramTooLargeError as exc:  # --large: beyond both limits
            print(" | ".join([name, str(H.shape[0]), str(S.shape[1]), str(H.shape[1]),
                              f"refused after {time.perf_counter() - t:.2f} s: {exc}"]))
            continue
        t_diag = time.perf_counter() - t
        t = time.perf_counter()
        res = (solve_max_margin(partial_ntp_svm_problem(H, sep)) if sep.n_separable
               and not sep.is_separable else None)
        t_mm = time.perf_counter() - t
        assert res is None or res.status == "optimal"
        t = time.perf_counter()
        fin = partial_finite_component(H, P, sep, pi)
        t_fin = time.perf_counter() - t
        assert fin.converged
        lp = "-"
        if sep.method == "stationary point" and S.size - S.sum() <= 20_000:
            t = time.perf_counter()
            assert ntp_separability(H, S, method="highs").n_separable == 0
            lp = f"{time.perf_counter() - t:.2f}"
        elif sep.method == "highs":
            lp = f"{t_diag:.2f} (is the diagnosis)"
        ref = _reference_svm(H, S, args.svm_cap)
        print(" | ".join([name, str(H.shape[0]), str(S.shape[1]), str(H.shape[1]), sep.method,
                          f"{sep.fraction:.3f}", f"{t_diag:.2f}", f"{t_mm:.2f}",
                          f"{t_fin:.2f}", lp, ref]), flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
