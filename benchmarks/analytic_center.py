"""The analytic center's certificate against the linear program and the loss's table.

On real text (two-word contexts of the Python documentation's first sentences, no row
separable) it prints, in one run: the rows that ``W_fin``'s table certifies not
separable (:func:`skntp.svm.stationary_separability`), the time and rows of the
analytic center's table (:func:`skntp.svm.analytic_center_separability`, from
``W_fin``), and the reference, the separability linear program of
:func:`skntp.svm.ntp_separability` by HiGHS (``max_rows`` raised to the case's rows),
with a time cap.  Usage::

    python benchmarks/analytic_center.py [--sentences 40 600] [--lp-cap 300]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time
import warnings

import numpy as np

#: sentences -> (n_words, n_features): the tests' case and the 1.2-million-row case
CASES = {40: (100, 8), 600: (600, 64)}


def _data(sentences):
    from skntp.datasets import load_text_ntp
    from skntp.decoder import aggregate_contexts

    n_words, n_features = CASES[sentences]
    X, y = load_text_ntp(corpus="python", context_size=2, n_words=n_words,
                         n_features=n_features, n_sentences=sentences, embedding="words",
                         return_X_y=True)
    labels, y = np.unique(y, return_inverse=True)
    H, pi, P, _ = aggregate_contexts(X, np.eye(labels.size)[y])
    return H, pi, P.toarray()


def _lp(sentences, out):
    from skntp.svm import ProgramTooLargeError, ntp_separability

    H, _, P = _data(sentences)
    S = P > 0
    start = time.perf_counter()
    try:
        found = ntp_separability(H, S, method="highs", max_rows=int(S.size))
    except ProgramTooLargeError as exc:  # (refused before it is built: memory)
        out.put(f"refused: {str(exc)[:160]}")
        return
    out.put(f"{time.perf_counter() - start:.1f} s, {found.status}, {found.n_separable} "
            "rows separable")


def _center(sentences):
    from skntp.svm import (
        NTPSeparability,
        analytic_center_separability,
        partial_finite_component,
        stationary_separability,
    )

    H, pi, P = _data(sentences)
    S = P > 0
    m, V = S.shape
    print(f"\n== the first {sentences} sentences: m = {m}, V = {V}, d = {H.shape[1]}, "
          f"{int((~S).sum())} rows", flush=True)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fin = partial_finite_component(H, P, NTPSeparability(np.zeros_like(S), S,
                                                             "stationary point"), pi)
    table = stationary_separability(H, S, fin, P, pi)
    print(f"W_fin: {fin.n_iter} Newton steps, relative gradient {fin.grad_norm:.2g}, "
          f"{time.perf_counter() - start:.1f} s; its table certifies "
          f"{table.n_rows - table.n_undecided} of {table.n_rows} rows", flush=True)
    start = time.perf_counter()
    center = analytic_center_separability(H, S, start=fin.W)
    print(f"analytic center from W_fin: {time.perf_counter() - start:.1f} s, "
          + ("every row certified not separable" if center is not None
             else "not certified"), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, nargs="+", default=[40, 600],
                        choices=sorted(CASES))
    parser.add_argument("--lp-cap", type=float, default=300.0)
    args = parser.parse_args()
    print("load average before:", os.getloadavg(), f"{os.cpu_count()} cores")
    for sentences in args.sentences:
        _center(sentences)
        out = multiprocessing.Queue()
        lp = multiprocessing.Process(target=_lp, args=(sentences, out))
        lp.start()
        lp.join(args.lp_cap)
        if lp.is_alive():
            lp.terminate()
            lp.join()
            print(f"reference, the linear program by HiGHS: no answer within "
                  f"{args.lp_cap:.0f} s")
        else:
            print("reference, the linear program by HiGHS:",
                  out.get() if lp.exitcode == 0 else f"failed (exit code {lp.exitcode})")
    print("peak RSS GiB (this process)",
          round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2))
    print("load average after:", os.getloadavg())


if __name__ == "__main__":
    main()
