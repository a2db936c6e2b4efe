"""Benchmark of the max-margin core: method 'accelerated-dual' vs cvxpy/Clarabel and liblinear.

Prints one table; every ratio is measured in the same run.  Usage::

    python benchmarks/maxmargin.py [--rows ntp,onehot,scale,att,att-large,head,graph]
                                   [--cvxpy-timeout 600]

cvxpy runs in a subprocess with a wall-clock limit; a row whose cvxpy run
hits the limit reports the speed-up as a lower bound (">").
Accuracy columns: ``relerr`` is ``||W - W_ref|| / ||W_ref||`` with ``W_ref``
the cvxpy solution (or, where cvxpy cannot run, the KKT-certified 'accelerated-dual'
solution at tol=1e-12), ``viol`` the largest constraint violation.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
import warnings

import numpy as np

from skntp.svm import (
    BilinearScores,
    Constraints,
    KeyScores,
    MaxMarginProblem,
    exchangeable_tokens,
    ntp_svm,
    ntp_svm_problem,
    solve_max_margin,
)
from skntp.svm._problem import constraint_violation


# --------------------------------------------------------------------------
# problem recipes (all feasible by construction: a teacher separates them)
# --------------------------------------------------------------------------
def ntp_random_supports(rng, m, d, V, smax):
    """d > m: NTP-separable for any supports (overparameterized)."""
    H = rng.standard_normal((m, d))
    k = rng.integers(1, smax + 1, size=m)
    ranks = np.argsort(np.argsort(rng.random((m, V)), axis=1), axis=1)
    return ntp_svm_problem(H, ranks < k[:, None])


def ntp_grouped(rng, m, d, V, smax):
    """m >> d: tokens in groups of 1..smax share a teacher row; S_j = best group.

    Returns the contexts and the support matrix.
    """
    sizes = []
    while sum(sizes) < V:
        sizes.append(int(rng.integers(1, smax + 1)))
    sizes[-1] -= sum(sizes) - V
    group = np.repeat(np.arange(len(sizes)), sizes)
    G = rng.standard_normal((len(sizes), d))
    H = rng.standard_normal((m, d))
    best = np.argmax(H @ G.T, axis=1)
    return H, group[None, :] == best[:, None]


def onehot(rng, m, d, V):
    H = rng.standard_normal((m, d))
    y = np.argmax(H @ rng.standard_normal((V, d)).T, axis=1)
    return H, y, ntp_svm_problem(H, np.eye(V, dtype=bool)[y])


def att(rng, n, T, d):
    K = rng.standard_normal((n, T, d))
    sel = np.argmax(K @ rng.standard_normal(d), axis=1)
    i, t = np.nonzero(np.arange(T)[None, :] != sel[:, None])
    prob = MaxMarginProblem(KeyScores(K), Constraints(i, sel[i], t, np.ones(i.size),
                                                      np.zeros(i.size, bool)), name="ATT-SVM")
    diffs = K[i, sel[i]] - K[i, t]
    return diffs, prob


def head(rng, n, d):
    R = rng.standard_normal((n, d))
    y = np.sign(R @ rng.standard_normal(d))
    prob = MaxMarginProblem(
        KeyScores((y[:, None] * R)[:, None, :]),
        Constraints(np.arange(n), np.zeros(n), -np.ones(n), np.ones(n), np.zeros(n, bool)),
        name="head SVM")
    return R, y, prob


def graph(rng, K, d, n, length):
    """Sequences of random tokens; label = the teacher's top-priority token.

    Edges ``label => x`` for every other token ``x`` of a sequence, in the
    graph of its last token (Graph-SVM of the self-attention paper, acyclic).
    """
    E = rng.standard_normal((K, d)) / np.sqrt(d)
    S0 = (E @ rng.standard_normal((d, d)) @ E.T).T  # S0[k, i] = e_i^T W0 e_k
    seq = np.stack([rng.choice(K, length, replace=False) for _ in range(n)])
    last = seq[:, -1]
    label = seq[np.arange(n), np.argmax(S0[last[:, None], seq], axis=1)]
    k = np.repeat(last, length)
    i = np.repeat(label, length)
    j = seq.ravel()
    keep = i != j
    kij = np.unique(np.stack([k[keep], i[keep], j[keep]], 1), axis=0)
    query = np.unique(kij[:, 0])
    block_of = np.full(K, -1)
    block_of[query] = np.arange(query.size)
    return MaxMarginProblem(
        BilinearScores(E[query], E),
        Constraints(block_of[kij[:, 0]], kij[:, 1], kij[:, 2], np.ones(len(kij)),
                    np.zeros(len(kij), bool)), name="Graph-SVM")


def graph_cvxpy_matrix(problem):
    """Constraint rows ``(e_i - e_j) (x) q_k`` without the dense score matrix."""
    import scipy.sparse as sp

    c = problem.constraints
    E, Q = problem.scores.outputs, problem.scores.queries
    rows = (E[c.pos] - E[c.ref])[:, :, None] * Q[c.block][:, None, :]
    return sp.csr_matrix(rows.reshape(len(c), -1))


# --------------------------------------------------------------------------
# timed runs
# --------------------------------------------------------------------------
def _cvxpy_worker(problem, A, queue):
    import cvxpy as cp

    t = time.perf_counter()
    if A is None:
        res = solve_max_margin(problem, method="cvxpy")
        queue.put((time.perf_counter() - t, res.primal))
        return
    c = problem.constraints
    w = cp.Variable(A.shape[1])
    prob = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(w)), [A @ w >= c.rhs])
    prob.solve(solver=cp.CLARABEL)
    queue.put((time.perf_counter() - t, np.asarray(w.value).reshape(problem.shape)))


def run_with_timeout(worker, args, timeout, on_timeout):
    """``worker(*args, queue)`` in a forked process: what it puts on the queue, or
    ``on_timeout`` when it has not finished within ``timeout`` seconds (then killed)."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=worker, args=(*args, queue))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return on_timeout
    return queue.get()


def run_cvxpy(problem, timeout, A=None):
    """(seconds, W) or (timeout, None) if cvxpy did not finish in time."""
    return run_with_timeout(_cvxpy_worker, (problem, A), timeout, (timeout, None))


def timed(f, repeat=1):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t)
    return best, out


def rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def cosine_err(a, b):
    return float(1.0 - np.sum(a * b) / np.linalg.norm(a) / np.linalg.norm(b))


ROWS = []


def row(name, method, t, ref_name, t_ref, err, viol, note=""):
    ratio = t_ref / t if t > 0 else np.inf
    ROWS.append((name, method, t, ref_name, t_ref, ratio, err, viol, note))
    print(f"  {name} | {method} {t:.3f}s | {ref_name} {t_ref:.3f}s | x{ratio:.1f} | "
          f"relerr {err:.1e} | viol {viol:.1e} {note}", flush=True)


def bench_ntp(args):
    rng = np.random.default_rng(0)
    p = ntp_random_supports(rng, 150, 160, 60, 3)
    t, r = timed(lambda: solve_max_margin(p, method="accelerated-dual"), repeat=3)
    tc, Wc = run_cvxpy(p, args.cvxpy_timeout)
    err = rel(r.primal, Wc) if Wc is not None else float("nan")
    row("NTP-SVM m=150 d=160 V=60 |S|=1..3", "accelerated-dual", t, "cvxpy", tc, err,
        constraint_violation(p, r.primal), "" if Wc is not None else "(cvxpy timed out)")


def bench_onehot(args):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(1)
    H, y, p = onehot(rng, 2000, 64, 32)
    t, r = timed(lambda: solve_max_margin(p, method="accelerated-dual"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        ref_res = solve_max_margin(p, method="accelerated-dual", tol=1e-12)
    ref = ref_res.primal

    def svc():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return LinearSVC(multi_class="crammer_singer", fit_intercept=False, C=1e6,
                             tol=1e-8, max_iter=100_000).fit(H, y)

    ts, s = timed(svc)
    Ws = s.coef_
    # equal accuracy: compare directions (LinearSVC's scale is C-dependent)
    e_fast = cosine_err(r.primal, ref)
    e_svc = cosine_err(Ws, ref)
    row("one-hot CS m=2000 d=64 V=32", "accelerated-dual", t, "LinearSVC-CS", ts,
        rel(r.primal, ref),
        constraint_violation(p, r.primal),
        f"(vs W^mm certified to gap {ref_res.gap:.0e}: 1-cos fast {e_fast:.1e}, "
        f"LinearSVC {e_svc:.1e}; LinearSVC relerr {rel(Ws, ref):.1e})")


def bench_scale(args):
    """The user-facing solve (``ntp_svm``): the tokens of a group always share
    their supports, so the program is solved over the token classes
    (:func:`skntp.svm.exchangeable_tokens`) and mapped back, exactly."""
    import resource

    rng = np.random.default_rng(2)
    H, S = ntp_grouped(rng, 10_000, 256, 500, 5)
    n_classes = exchangeable_tokens(S)[2].size
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t, (W, r) = timed(lambda: ntp_svm(H, S, method="accelerated-dual",
                                          max_iter=args.scale_max_iter, return_result=True))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # violation of the full program (V = 500 positions), from the scores
    scores = H @ W.T
    in_min = np.where(S, scores, np.inf).min(axis=1)
    in_max = np.where(S, scores, -np.inf).max(axis=1)
    out_max = np.where(S, -np.inf, scores).max(axis=1)
    viol = max(float(np.max(np.maximum(1.0 - (in_min - out_max), 0.0))),
               float(np.max(in_max - in_min)))
    note = (f"status={r.status} it={r.n_iter} gap={r.gap:.1e}; {n_classes} token classes; "
            f"peak RSS {rss / 2**20:.2f} GiB ({rss0 / 2**20:.2f} GiB before)")
    if rec:
        note += " (ConvergenceWarning)"
    row("NTP-SVM m=10000 d=256 V=500 |S|<=5", "ntp_svm fast", t, "none", np.nan, np.nan,
        viol, note)


def key_score_rows(name, p, X, y, args, *, auto_repeat, fast_max_iter, svc_max_iter):
    """Rows for a key-score program: auto and 'accelerated-dual' vs cvxpy, auto vs LinearSVC(hinge)
    on the equivalent binary problem ``(X, y)`` (no intercept)."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.svm import LinearSVC

    ta, ra = timed(lambda: solve_max_margin(p, method="auto"), repeat=auto_repeat)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        t, r = timed(lambda: solve_max_margin(p, method="accelerated-dual", max_iter=fast_max_iter))
    tc, Wc = run_cvxpy(p, args.cvxpy_timeout)

    def svc():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            return LinearSVC(loss="hinge", fit_intercept=False, C=1e6, tol=1e-8,
                             max_iter=svc_max_iter).fit(X, y)

    ts, s = timed(svc)
    ref = Wc if Wc is not None else ra.primal
    row(name, f"auto (-> {ra.method})", ta, "cvxpy", tc, rel(ra.primal, ref),
        constraint_violation(p, ra.primal))
    row(name, f"auto (-> {ra.method})", ta, "LinearSVC-hinge", ts, rel(ra.primal, ref),
        constraint_violation(p, ra.primal),
        f"(LinearSVC 1-cos {cosine_err(s.coef_.ravel(), ref):.1e})")
    row(name, "accelerated-dual", t, "cvxpy", tc, rel(r.primal, ref),
        constraint_violation(p, r.primal),
        f"status={r.status} it={r.n_iter}" + (" (ConvergenceWarning)" if rec else ""))


def bench_att(args):
    rng = np.random.default_rng(3)
    diffs, p = att(rng, 1000, 16, 64)
    X = np.vstack([diffs, -diffs])
    y = np.r_[np.ones(len(diffs)), -np.ones(len(diffs))]
    key_score_rows("ATT-SVM n=1000 T=16 d=64", p, X, y, args, auto_repeat=3,
                   fast_max_iter=args.att_max_iter, svc_max_iter=args.svc_max_iter)


def bench_att_large(args):
    rng = np.random.default_rng(11)
    _, p = att(rng, 10_000, 16, 64)
    ta, ra = timed(lambda: solve_max_margin(p, method="auto"))
    tc, Wc = run_cvxpy(p, args.cvxpy_timeout)
    ref = Wc if Wc is not None else ra.primal
    row("ATT-SVM n=10000 T=16 d=64", f"auto (-> {ra.method})", ta, "cvxpy", tc,
        rel(ra.primal, ref), constraint_violation(p, ra.primal), f"rounds={ra.n_iter}")


def bench_head(args):
    rng = np.random.default_rng(4)
    R, y, p = head(rng, 1000, 64)
    key_score_rows("head SVM n=1000 d=64", p, R, y, args, auto_repeat=20,
                   fast_max_iter=100_000, svc_max_iter=100_000)


def bench_graph(args):
    rng = np.random.default_rng(5)
    p = graph(rng, 200, 64, 5000, args.graph_length)
    t, r = timed(lambda: solve_max_margin(p, method="accelerated-dual"))
    tc, Wc = run_cvxpy(p, args.cvxpy_timeout, A=graph_cvxpy_matrix(p))
    err = rel(r.primal, Wc) if Wc is not None else float("nan")
    viol = float(np.max(np.maximum(p.constraints.rhs - graph_cvxpy_matrix(p) @ r.primal.ravel(),
                                   0)))
    row(f"Graph-SVM K=200 d=64 n=5000 ({len(p.constraints)} edges)", "accelerated-dual", t,
        "cvxpy", tc,
        err, viol, f"it={r.n_iter}" + ("" if Wc is not None else " (cvxpy timed out: ratio >)"))


BENCHES = {"ntp": bench_ntp, "onehot": bench_onehot, "scale": bench_scale, "att": bench_att,
           "att-large": bench_att_large,
           "head": bench_head, "graph": bench_graph}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(BENCHES))
    ap.add_argument("--cvxpy-timeout", type=float, default=600.0)
    ap.add_argument("--scale-max-iter", type=int, default=100_000)
    ap.add_argument("--graph-length", type=int, default=4)
    ap.add_argument("--att-max-iter", type=int, default=20_000)
    ap.add_argument("--svc-max-iter", type=int, default=100_000)
    args = ap.parse_args()
    for name in args.rows.split(","):
        print(f"[{name}]", flush=True)
        BENCHES[name](args)
    print()
    print("| problem | method | time (s) | reference | ref time (s) | speed-up | "
          "rel. error | max violation | notes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, m, t, rn, tr, ratio, err, viol, note in ROWS:
        print(f"| {name} | {m} | {t:.3f} | {rn} | {tr:.3f} | {ratio:.1f}x | {err:.1e} | "
              f"{viol:.1e} | {note} |")


if __name__ == "__main__":
    main()
