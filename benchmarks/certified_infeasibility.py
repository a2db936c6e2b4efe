"""Certified "infeasible": the time from a program to its checked Farkas multipliers.

Three workloads, each against its reference measured in the same run:

* the NTP-SVM of real text where no row is separable (two-word contexts of the Python
  documentation's first 40 sentences, d = 16, 13,642 margin rows): the program's own
  proof (the loss's stationary point, then the analytic center of the margin polytope)
  checked before any method, against the dual methods that had to certify it before
  (``method="auto"`` with the program's proof removed) and Clarabel (``"cvxpy"``);
* ATT-SVM programs that are infeasible (two inputs with swapped keys, as in the tests):
  ``method="dual-active-set"``, whose infeasibility now carries its Farkas multipliers,
  against the same method with those multipliers dropped (the dispatcher then solves
  its own Farkas LP by HiGHS, as before) and against ``"cvxpy"``;
* with ``--corpus``, the NTP-SVM of the whole Python documentation at d = 768 (11,071
  two-word contexts, V = 2,128: 23.5 million rows), where the loss's proof is out of
  reach: the exact tables of closed walks of contexts (:func:`skntp.svm.cycle_certificate`,
  first round), checked as the program's own proof, against ``dcd`` without it (what
  the decoder ran there before), in a subprocess with a time cap (``--cap``).

Every answer printed is ``NotSeparableError`` certified by
:func:`skntp.svm.solve_max_margin` from the program's rows.  Usage::

    python benchmarks/certified_infeasibility.py [--programs 200] [--corpus [--cap 300]]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))


def _timed(problem, method, repeat=1):
    from skntp.svm import NotSeparableError, solve_max_margin

    began = time.perf_counter()
    for _ in range(repeat):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                solve_max_margin(problem, method=method)
        except NotSeparableError as exc:
            bound = exc.result.margin_bound
        else:
            raise AssertionError(f"{problem.name} by {method!r}: not infeasible")
    return (time.perf_counter() - began) / repeat, bound


def _real_text():
    from helpers import python_text_40

    from skntp.svm import ntp_svm_problem

    _, _, H, _, P = python_text_40()
    problem = ntp_svm_problem(H, P > 0)
    print(f"\n== NTP-SVM of real text: {H.shape[0]} contexts x {P.shape[1]} tokens, "
          f"d = {H.shape[1]}, {len(problem.constraints)} rows")
    own, bound = _timed(problem, "auto")
    print(f"  the program's own proof, checked:          {own:8.2f} s  "
          f"(margin bound {bound:.1e})")
    before = dataclasses.replace(problem, infeasibility_proof=None)
    for method in ("auto", "cvxpy"):
        t, bound = _timed(before, method)
        print(f"  reference, no proof, method={method!r}:{'':{8 - len(method)}} {t:8.2f} s  "
              f"(margin bound {bound:.1e})")


def _att_svm(n_programs):
    from skntp.svm import att_svm_problem
    from skntp.svm.solvers import dual_active_set

    rng = np.random.default_rng(0)
    problems = []
    for _ in range(n_programs):
        K = rng.standard_normal((int(rng.integers(5, 40)), 4, 6))
        a, b = rng.standard_normal(6), rng.standard_normal(6)
        K[0, 0], K[0, 1], K[1, 0], K[1, 1] = a, b, b, a
        sel = np.argmax(K @ rng.standard_normal(6), axis=1)
        sel[0] = sel[1] = 0
        problems.append(att_svm_problem(K, sel))
    print(f"\n== {n_programs} infeasible ATT-SVM programs (5 to 39 inputs, T = 4, k = 6)")

    def total(method):
        began = time.perf_counter()
        worst = max(_timed(p, method)[1] for p in problems)
        return time.perf_counter() - began, worst

    t, worst = total("dual-active-set")
    print(f"  dual-active-set, its own multipliers:      {t:8.2f} s  (largest bound "
          f"{worst:.1e})")
    kept = dual_active_set._Infeasible.__init__

    def without_ray(self, ray):
        kept(self, None)

    dual_active_set._Infeasible.__init__ = without_ray
    try:
        t, worst = total("dual-active-set")
    finally:
        dual_active_set._Infeasible.__init__ = kept
    print(f"  reference, its multipliers dropped (LP):   {t:8.2f} s  (largest bound "
          f"{worst:.1e})")
    t, worst = total("cvxpy")
    print(f"  reference, method='cvxpy':                 {t:8.2f} s  (largest bound "
          f"{worst:.1e})")


def _corpus_program():
    from corpus_scale import _load

    from skntp.decoder import aggregate_contexts
    from skntp.losses.decoder import next_token_targets
    from skntp.svm import ntp_svm_problem

    X, y = _load("python-768")
    _, Y = next_token_targets(y, len(y), None)
    H, _, P, _ = aggregate_contexts(X, Y, np.ones(len(y)))
    return H, P, ntp_svm_problem(H, P > 0)


def _without_proof(out):
    from skntp.svm import NotSeparableError, solve_max_margin

    _, _, problem = _corpus_program()
    problem = dataclasses.replace(problem, infeasibility_proof=None)
    began = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = solve_max_margin(problem, method="dcd")
        what = res.status
    except NotSeparableError as exc:
        what = f"infeasible (margin bound {exc.result.margin_bound:.1e})"
    out.put(f"{what}, {time.perf_counter() - began:.1f} s")


def _corpus(cap):
    import multiprocessing
    import resource

    from skntp.svm import check_cycle_certificate, cycle_certificate

    began = time.perf_counter()
    H, P, problem = _corpus_program()
    loaded = time.perf_counter() - began
    print(f"\n== NTP-SVM of the Python documentation at d = {H.shape[1]}: {H.shape[0]} "
          f"contexts x {P.shape[1]} tokens, {len(problem.constraints)} rows (loaded and "
          f"built in {loaded:.1f} s)")
    own, bound = _timed(problem, "auto")
    print(f"  the program's own proof (closed walks), checked: {own:8.2f} s  "
          f"(margin bound {bound:.1e})")
    began = time.perf_counter()
    found = cycle_certificate(H, P)
    rows = check_cycle_certificate(H, P, found)
    print(f"  every round of the closed walks, and its exact check: "
          f"{time.perf_counter() - began:.2f} s ({int(rows.sum())} rows not separable, "
          f"{found.n_rounds} rounds, {len(found)} tables)")
    print(f"  peak RSS so far: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20:.2f}"
          " GiB")
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_without_proof, args=(out,))
    proc.start()
    proc.join(cap)
    if proc.is_alive():
        proc.kill()
        proc.join()
        answer = f"no answer within the cap of {cap} s"
    else:
        answer = out.get() if proc.exitcode == 0 else f"exit code {proc.exitcode}"
    print(f"  reference, no proof, method='dcd': {answer}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--corpus", action="store_true",
                        help="also the NTP-SVM of the Python documentation at d = 768")
    parser.add_argument("--cap", type=float, default=300.0,
                        help="seconds the corpus's reference may run")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    _real_text()
    _att_svm(args.programs)
    if args.corpus:
        _corpus(args.cap)
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
