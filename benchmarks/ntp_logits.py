"""The logit-space NTP-SVM of NTP-UFM (``skntp.svm.ntp_logit_svm``) against cvxpy.

Every figure is measured in this run, each beside its reference, on the same
random supports (each token in ``S_j`` with probability ``--density``, at
least one in and one out):

* ``skntp``: the whole call ``ntp_logit_svm(S)`` (``method="auto"``: ADMM
  with singular value thresholding, ``skntp/svm/solvers/svt_admm.py``,
  certified on the package's anchored rows by the dispatcher's certificate):
  its time, status, certified signed gap, method and iterations;
* ``cvxpy+SCS`` and ``cvxpy+Clarabel``: the program written compactly for
  cvxpy by hand (``L`` of shape ``(V, m)``, one in-support level ``c_j`` per
  context: ``L[z, j] = c_j`` on ``S_j``, ``L[v, j] <= c_j - 1`` off it,
  ``min normNuc(L)``), at the solvers' default tolerances, with the
  relative difference of its optimal value from the certified one.  Each runs
  in a child process stopped after ``--cvxpy-timeout`` seconds (printed as
  ``> T`` and ``timeout``);
* the closed-form proxy (centered support matrix): its time and its
  distance to ``L_mm`` (Frobenius distance of the normalized matrices, and
  the ratio of nuclear norms).

A solver is skipped at the sizes after one where it took longer than
``--time-limit`` seconds (or timed out).  The machine's load (``os.getloadavg()``) is printed
before every size: on a shared machine it changes within a run.

Usage::

    python benchmarks/ntp_logits.py [--sizes 20 40 60 100] [--density 0.3]
                                    [--time-limit 120] [--seed 0]
                                    [--max-size SCS CLARABEL] [--cvxpy-timeout 300]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue as queue_module
import time
import warnings

import numpy as np


def random_supports(rng, m, V, density):
    S = rng.random((m, V)) < density
    S[np.arange(m), rng.integers(0, V, m)] = True
    full = S.all(axis=1)
    S[full, rng.integers(0, V, int(full.sum()))] = False
    return S


def cvxpy_compact(S, solver):
    """``(optimal value, status)`` of the compact program by cvxpy with ``solver``."""
    import cvxpy as cp

    m, V = S.shape
    L, c = cp.Variable((V, m)), cp.Variable(m)
    inside = S.T.astype(float)
    shifted = L - np.ones((V, 1)) @ cp.reshape(c, (1, m), order="C")
    cons = [cp.multiply(inside, shifted) == 0, cp.multiply(1 - inside, shifted + 1) <= 0]
    prob = cp.Problem(cp.Minimize(cp.normNuc(L)), cons)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prob.solve(solver=solver)
    return prob.value, prob.status


def _child(S, solver, queue):
    queue.put(cvxpy_compact(S, solver))


def cvxpy_with_timeout(S, solver, timeout):
    """``(value, status, seconds)`` of :func:`cvxpy_compact` in a child process.

    The child is stopped after ``timeout`` seconds: ``(None, "timeout", timeout)``.
    """
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(S, solver, queue))
    t = time.perf_counter()
    proc.start()
    try:
        value, status = queue.get(timeout=timeout)
    except queue_module.Empty:
        proc.kill()
        proc.join()
        return None, "timeout", timeout
    dt = time.perf_counter() - t
    proc.join()
    return value, status, dt


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 40, 60, 100])
    parser.add_argument("--density", type=float, default=0.3)
    parser.add_argument("--time-limit", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-size", type=int, nargs=2, metavar=("SCS", "CLARABEL"),
                        default=[10**9, 10**9],
                        help="largest m = V at which the compact cvxpy program is solved "
                             "by SCS and by Clarabel (above: skipped)")
    parser.add_argument("--cvxpy-timeout", type=float, default=300.0,
                        help="seconds after which a cvxpy run is stopped")
    args = parser.parse_args()

    import cvxpy as cp

    from skntp.svm import ntp_logit_svm, support_proxy

    print(f"load: {os.getloadavg()}, cores: {os.cpu_count()}")
    print(f"{'m=V':>6} {'solver':>15} {'time s':>9} {'status':>12} {'gap':>10} "
          f"{'rel. value diff':>16}  method (iterations)")
    slow = set()
    for n in args.sizes:
        S = random_supports(np.random.default_rng(args.seed + n), n, n, args.density)
        print(f"m = V = {n}: load {tuple(round(x, 2) for x in os.getloadavg())}", flush=True)
        value = None
        if "skntp" not in slow:
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                res = ntp_logit_svm(S)
            dt = time.perf_counter() - t
            value, L_mm = res.objective, res.primal
            print(f"{n:>6} {'skntp (auto)':>15} {dt:>9.2f} {res.status:>12} {res.gap:>10.2e} "
                  f"{'':>16}  {res.method} ({res.n_iter})", flush=True)
            if dt > args.time_limit:
                slow.add("skntp")
        for name, solver, limit in (("cvxpy+SCS", cp.SCS, args.max_size[0]),
                                    ("cvxpy+Clarabel", cp.CLARABEL, args.max_size[1])):
            if name in slow or n > limit:
                print(f"{n:>6} {name:>15} {'skipped':>9}")
                continue
            val, status, dt = cvxpy_with_timeout(S, solver, args.cvxpy_timeout)
            diff = (f"{abs(val - value) / value:>16.2e}" if value is not None and val is not None
                    else f"{'':>16}")
            shown = f"> {dt:.0f}" if status == "timeout" else f"{dt:.2f}"
            print(f"{n:>6} {name:>15} {shown:>9} {status:>12} {'':>10} {diff}", flush=True)
            if dt > args.time_limit or status == "timeout":
                slow.add(name)
        t = time.perf_counter()
        P = support_proxy(S)
        dt = time.perf_counter() - t
        if value is not None:
            dist = np.linalg.norm(P / np.linalg.norm(P) - L_mm / np.linalg.norm(L_mm))
            ratio = np.linalg.svd(P, compute_uv=False).sum() / value
            print(f"{n:>6} {'proxy':>15} {dt:>9.4f}   distance to L_mm {dist:.3e}, "
                  f"||proxy||_* / ||L_mm||_* = {ratio:.5f}")


if __name__ == "__main__":
    main()
