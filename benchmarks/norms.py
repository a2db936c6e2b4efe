"""Max-margin programs in other norms: our methods against cvxpy (Clarabel).

Every figure is measured in this run, each beside its reference:

* the entrywise max-norm (l-infinity) NTP-SVM of ``--contexts`` distinct
  contexts (default 1000), ``d = 128``, ``V = 50``
  (:func:`skntp.datasets.make_ntp_svm_data`, NTP-separable by construction):
  one :class:`~skntp.svm.MaxMarginProblem`, built once, solved by our
  structured interior-point method (``method="lp-ipm"``, the default of
  ``method="auto"``) and by cvxpy with Clarabel (``method="cvxpy"``), and with
  ``--highs`` also by HiGHS (``method="highs"``);
  wall time of each, their ratio and the relative difference of the optimal
  values.  Each solver gets ``--time-limit`` seconds (HiGHS's own limit; a
  Clarabel run is stopped from outside by the same limit) and a run past it
  is reported as such;
* the spectral and lp (p = 1.5, 3) NTP-SVM on a moderate instance
  (``--small-contexts`` contexts, ``d = 12``, ``V = 8``): our barrier methods
  against the same cvxpy path.

The machine load (``os.getloadavg()``) is printed before and after: timings
taken under load are not comparable with quiet ones.

Usage::

    python benchmarks/norms.py [--contexts 200 1000] [--time-limit 600] [--highs] [--busy]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
import warnings

import numpy as np


def _load():
    a, b, c = os.getloadavg()
    return f"load average {a:.2f} {b:.2f} {c:.2f}"


def _solve(problem, method, queue):
    from skntp.svm import solve_max_margin

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        try:
            res = solve_max_margin(problem, method=method)
        except Exception as exc:  # reported, not waited for
            queue.put((time.perf_counter() - t, f"{type(exc).__name__}: {exc}"))
            return
        queue.put((time.perf_counter() - t, res))


def timed(problem, method, limit):
    """``(seconds, result)`` of one solve in a child process; ``(None, None)`` past ``limit``."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_solve, args=(problem, method, queue))
    proc.start()
    try:
        seconds, res = queue.get(timeout=limit)
    except Exception:  # queue.Empty: past the limit
        seconds, res = None, None
    proc.join(timeout=5)
    if proc.is_alive():
        proc.terminate()
        proc.join()
    return seconds, res


def compare(name, problem, ours, limit, reference=None):
    """Time ``ours`` and cvxpy (Clarabel) on ``problem``; ``reference``, the
    ``(seconds, result)`` of an earlier cvxpy run on it, is reused.  Returns the
    cvxpy run."""
    from skntp.svm._norms import norm_value

    t_ours, r_ours = timed(problem, ours, limit)
    t_ref, r_ref = timed(problem, "cvxpy", limit) if reference is None else reference
    reference = (t_ref, r_ref)
    fmt = lambda t: "past the limit" if t is None else f"{t:8.2f} s"  # noqa: E731
    print(f"{name}")
    for who, r in ((ours, r_ours), ("cvxpy", r_ref)):
        if isinstance(r, str):
            print(f"  {who} failed: {r}")
    r_ours = None if isinstance(r_ours, str) else r_ours
    r_ref = None if isinstance(r_ref, str) else r_ref
    print(f"  ours ({ours}): {fmt(t_ours)}"
          + ("" if r_ours is None else f"  gap {r_ours.gap:.1e}  violation "
             f"{r_ours.max_violation:.1e}"))
    print(f"  cvxpy (Clarabel): {fmt(t_ref)}"
          + ("" if r_ref is None else f"  gap {r_ref.gap:.1e}  violation "
             f"{r_ref.max_violation:.1e}"))
    if r_ours is not None and r_ref is not None:
        a = norm_value(r_ours.primal, problem.norm)
        b = norm_value(r_ref.primal, problem.norm)
        print(f"  speed-up {t_ref / t_ours:.1f}x   relative difference of the optimal "
              f"values {abs(a - b) / b:.1e}")
    elif r_ours is not None and t_ref is None:
        print(f"  speed-up more than {limit / t_ours:.1f}x (cvxpy past {limit:g} s)")
    elif r_ours is not None:
        print(f"  cvxpy failed after {t_ref:.2f} s, {t_ref / t_ours:.1f}x the time of ours")
    return reference


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1000],
                        help="numbers of contexts of the max-norm instances")
    parser.add_argument("--busy", action="store_true",
                        help="run next to a busy process (two threads of 700 x 700 "
                        "matrix products, as in benchmarks/scaling.py)")
    parser.add_argument("--small-contexts", type=int, default=30)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--highs", action="store_true",
                        help="also time HiGHS on the max-norm program")
    parser.add_argument("--skip-large", action="store_true",
                        help="only the moderate spectral / lp instances")
    args = parser.parse_args(argv)
    sys.stdout.reconfigure(line_buffering=True)  # each figure as soon as it is measured

    busy = None
    if args.busy:
        import subprocess

        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from scaling import BUSY

        busy = subprocess.Popen([sys.executable, "-c", BUSY])
        time.sleep(2.0)
        print("next to a busy process (two threads of matrix products)")
    try:
        _run(args)
    finally:
        if busy is not None:
            busy.kill()


def _run(args):
    from skntp.datasets import make_ntp_svm_data
    from skntp.svm import ntp_svm_problem

    print(f"{os.cpu_count()} cores; {_load()}")
    for m in [] if args.skip_large else args.contexts:
        data = make_ntp_svm_data(m, 128, 50, random_state=args.seed)
        problem = ntp_svm_problem(data.contexts, data.support, norm="max")
        c = problem.constraints
        print(f"max-norm NTP-SVM: m = {m}, d = 128, V = 50: {len(c)} "
              f"constraints ({int(c.equality.sum())} equalities), "
              f"{problem.constraint_matrix().nnz} nonzeros")
        ref = compare("max norm (linear program)", problem, "lp-ipm", args.time_limit)
        if args.highs:
            compare("max norm (linear program), HiGHS", problem, "highs", args.time_limit,
                    reference=ref)
        print(_load())

    small = make_ntp_svm_data(args.small_contexts, 12, 8, random_state=args.seed)
    for norm, ours in (("spectral", "spectral-barrier"), (("lp", 1.5), "pnorm-barrier"),
                       (("lp", 3.0), "pnorm-barrier")):
        p = ntp_svm_problem(small.contexts, small.support, norm=norm)
        compare(f"{norm} norm, NTP-SVM m = {args.small_contexts}, d = 12, V = 8 "
                f"({len(p.constraints)} constraints)", p, ours, args.time_limit)
    print(_load())


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
