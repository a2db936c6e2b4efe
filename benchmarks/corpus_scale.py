"""The decoder's limits on whole corpora at the width of real models (#49).

Each case is fitted by ``NTPDecoderClassifier(solver="svm")`` in a subprocess: the
separability diagnosis (certified both ways, or its scalable side, the stationary point
of the loss over every row), ``W_fin`` and, where rows separate, ``W^mm_I``.  It prints
the time of each phase (from the ``skntp`` loggers), the answer and its certificate, the
finite part's relative gradient, and the peak memory of the subprocess; then, in the
same run, the reference: the NTP-SVM of every row by ``method="dcd"`` (what the
decoder ran when the diagnosis was out of reach), capped by ``--ref-cap`` seconds.
Usage::

    python benchmarks/corpus_scale.py [--cases python-768 python-4w-128 stdlib-768]
        [--ref-cap 300] [--fit-cap 3600] [--backend torch --device cuda]
        [--trajectory STEPS]

Cases: ``python-768``, the whole Python documentation, two-word contexts of two
384-dimensional word vectors (m = 11,071, V = 2,128, d = 768, the issue's example);
``python-4w-128``, four-word contexts at d = 128 (m = 18,535, V = 1,920);
``stdlib-768``, the standard library's docstrings, three-word contexts of 256-dimensional
vectors (m = 105,782, V = 2,990, d = 768); ``python-300s-128``, the first 300 sentences of
the Python documentation, two-word contexts of 64-dimensional vectors (m = 971, V = 291,
d = 128: 281,096 rows, partly separable, below ``m V d = 2e8``); ``python-600s-128``,
the first 600 sentences so (m = 2,140, V = 566, d = 128: 1.2 million rows, ``m V d =
1.55e8``; ``W_fin`` converges but its table certifies a sixth of the rows, and the
analytic center of the margin polytope certifies that no row is separable).
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import resource
import time

import numpy as np

CASES = {
    "python-768": {"corpus": "python", "context_size": 2, "n_words": 3000, "n_features": 384},
    "python-4w-128": {"corpus": "python", "context_size": 4, "n_words": 2000,
                      "n_features": 32},
    "stdlib-768": {"corpus": "stdlib-docstrings", "context_size": 3, "n_words": 3000,
                   "n_features": 256},
    "python-300s-128": {"corpus": "python", "context_size": 2, "n_words": 300,
                        "n_features": 64, "n_sentences": 300},
    "python-600s-128": {"corpus": "python", "context_size": 2, "n_words": 600,
                        "n_features": 64, "n_sentences": 600},
}

#: The estimator's array layer (``--backend``, ``--device``): W_fin's products run there.
ESTIMATOR = {"backend": "numpy", "device": None}


def _load(case):
    from skntp.datasets import load_text_ntp

    return load_text_ntp(embedding="words", return_X_y=True, **CASES[case])


def _contexts_and_supports(case):
    """The distinct contexts ``H`` (m, d) of a case and their supports ``S`` (m, V), a
    dense boolean mask: the inputs of the separability certificates' benchmarks."""
    import scipy.sparse as sp

    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets

    X, y = _load(case)
    _, Y = next_token_targets(y, len(y), None)
    H, _, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    S = P > 0
    return H, (S.toarray() if sp.issparse(S) else np.asarray(S))


class _Phases(logging.Handler):
    """Timestamps of the log records of skntp (each phase logs when it ends)."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.records = []
        self.start = time.perf_counter()

    def emit(self, record):
        self.records.append((round(time.perf_counter() - self.start, 1), record.getMessage()))


def _fit(case, out):
    import warnings

    from skntp import NTPDecoderClassifier
    from skntp.svm import _ntp_partial

    phases = _Phases()
    logging.getLogger("skntp").addHandler(phases)  # (skntp.svm's records propagate)
    for name in ("skntp", "skntp.svm"):
        logging.getLogger(name).setLevel(logging.INFO)
    fin_times = []
    real = _ntp_partial.partial_finite_component

    def timed(*args, **kwargs):
        start = time.perf_counter()
        fin = real(*args, **kwargs)
        fin_times.append((time.perf_counter() - start, fin.n_iter, fin.grad_norm,
                          fin.converged))
        return fin

    import skntp.decoder
    skntp.decoder.partial_finite_component = timed
    X, y = _load(case)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = NTPDecoderClassifier(solver="svm", **ESTIMATOR).fit(X, y)
    total = time.perf_counter() - start
    m, d = est.contexts_.shape
    out.put({
        "case": case, **ESTIMATOR, "n": len(y), "m": m, "d": d, "V": len(est.classes_),
        "fit_s": round(total, 1), "W_fin": fin_times,
        "is_ntp_separable_": est.is_ntp_separable_,
        "separable_fraction_": est.separable_fraction_,
        "loss_infimum_": est.loss_infimum_, "entropy_": est.entropy_,
        "mm_direction": est.mm_direction_ is not None,
        "warnings": [str(w.message)[:160] for w in caught],
        "log": phases.records,
        "peak_rss_GiB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
    })


def _reference(case, out):
    import warnings

    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets
    from skntp.svm import ntp_svm_problem, solve_max_margin

    X, y = _load(case)
    _, Y = next_token_targets(y, len(y), None)
    H, _, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    problem = ntp_svm_problem(H, P > 0)
    problem.infeasibility_proof = None  # the method itself, as the decoder ran it
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            res = solve_max_margin(problem, method="dcd")
            what = res.status
        except Exception as exc:  # noqa: BLE001 - reported as the reference's answer
            what = f"{type(exc).__name__}: {str(exc)[:100]}"
    out.put({"answer": what, "s": round(time.perf_counter() - start, 1)})


def _trajectory(case, steps):
    """``W_fin`` over every row without a work budget, for ``steps`` Newton steps: the
    relative gradient at each step, then the out-of-support rows' probabilities.  Where
    some rows are separable the loss has no minimizer: their probabilities fall toward 0
    while the gradient falls slowly (Ji & Telgarsky 2019), with no gap that would mark
    the split."""
    import warnings

    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets
    from skntp.svm import NTPSeparability, partial_finite_component
    from skntp.svm._ntp_partial import support_mask

    X, y = _load(case)
    _, Y = next_token_targets(y, len(y), None)
    H, weights, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    support = support_mask(P)
    everything = NTPSeparability(np.zeros_like(support), support, "stationary point")
    start = time.perf_counter()

    def step(k, grad, _):
        print(f"step {k:3d}  relative gradient {grad:.3g}  {time.perf_counter() - start:7.1f} s",
              flush=True)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fin = partial_finite_component(H, P, everything, weights, max_products=None,
                                       max_iter=steps, callback=step, **ESTIMATOR)
    L = H @ fin.W.T
    L -= L.max(axis=1, keepdims=True)
    L -= np.log(np.exp(L).sum(axis=1, keepdims=True))
    logs = L[~support] / np.log(10.0)
    print(f"{fin.n_iter} steps in {time.perf_counter() - start:.1f} s, relative gradient "
          f"{fin.grad_norm:.3g}, converged {fin.converged}, ||W_fin|| "
          f"{np.linalg.norm(fin.W):.4g}")
    print("log10 probabilities of the out-of-support rows, quantiles 0, 1e-3, 0.01, 0.1, "
          "0.5, 0.9, 1:", np.round(np.quantile(logs, [0, 1e-3, 0.01, 0.1, 0.5, 0.9, 1]), 2))
    print("rows below 1e-10, 1e-20, 1e-30:",
          [int(np.count_nonzero(logs < -t)) for t in (10, 20, 30)], "of", logs.size)
    print("peak RSS GiB", round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2))


def _run(target, case, cap):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=target, args=(case, out))
    start = time.perf_counter()
    proc.start()
    proc.join(cap)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"answer": f"no answer within the cap of {cap} s", "s": cap}
    if proc.exitcode != 0:
        return {"answer": f"exit code {proc.exitcode}",
                "s": round(time.perf_counter() - start, 1)}
    return out.get()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["python-768", "python-4w-128"],
                        choices=sorted(CASES))
    parser.add_argument("--ref-cap", type=float, default=300.0)
    parser.add_argument("--fit-cap", type=float, default=3600.0)
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--backend", default="numpy", choices=["numpy", "torch"])
    parser.add_argument("--device", default=None)
    parser.add_argument("--trajectory", type=int, metavar="STEPS",
                        help="instead: W_fin over every row, STEPS Newton steps, no budget")
    args = parser.parse_args()
    ESTIMATOR.update(backend=args.backend, device=args.device)
    print(f"load average before: {os.getloadavg()}, {os.cpu_count()} cores")
    if args.trajectory:
        for case in args.cases:
            print(f"\n== {case}: {CASES[case]}, W_fin over every row")
            _trajectory(case, args.trajectory)
        print(f"\nload average after: {os.getloadavg()}")
        return
    for case in args.cases:
        print(f"\n== {case}: {CASES[case]}")
        print(json.dumps(_run(_fit, case, args.fit_cap), indent=1, default=str))
        if not args.no_reference:
            print("reference, the NTP-SVM of every row by dcd:",
                  _run(_reference, case, args.ref_cap))
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
