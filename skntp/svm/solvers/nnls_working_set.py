"""The method ``"nnls"``: least-distance programming by NNLS on a growing working set.

Key-score programs without equalities (ATT-SVM, relaxed ATT-SVM, the head SVM)
in a parameter of at most 2000 entries: non-negative least squares (Lawson &
Hanson, *Solving Least Squares Problems*, ch. 23) on a working set of
constraints that grows by the most violated ones (cutting planes) until none
is violated.  It is ``auto``'s fallback for the programs on which the dual
active set's rank-one updates drift.

Why not a library: SciPy's NNLS needs the dense rows of every constraint; the
working set builds them only for the constraints that become violated.  On ATT-SVM
n = 1000, T = 16, d = 64 it takes 0.040 s against 2.82 s for Clarabel, on the head
SVM n = 1000, d = 64 0.013 s against 0.117 s (``benchmarks/README.md``, table
"Exact methods against Clarabel").  Against ``"dual-active-set"``,
in the same run, it takes 9.6 ms against 7.3 ms on the head SVM, 32.5 ms
against 25.2 ms on ATT-SVM n = 1000 and 0.576 s against 0.158 s on ATT-SVM
n = 10 000 (``benchmarks/README.md``, table "nnls against dual-active-set").
"""

from __future__ import annotations

import numpy as np

from .._problem import KeyScores, MaxMarginResult, NotSeparableError
from .least_distance import KeyRows, solve_ldp_checked

__all__ = ["MAX_DIM", "solve"]

#: the largest parameter the exact key-score methods take
MAX_DIM = 2_000


# working set: programs with at most this many constraints (or 2 (d + 1)) are
# solved whole; larger ones start from this many constraints
_WS_INITIAL = 300
_WS_MAX_ROUNDS = 500


def _initial_working_set(rows, h, k):
    """The ``k`` constraints tightest at a cheap point ``x0 = c u``.

    ``u`` is the normalized sum of the rows and ``c`` the smallest scale that
    satisfies every constraint with ``row . u > 1e-12 max(1, max_i |row_i . u|)``
    (``c = 1`` when that scale is not positive); the ``k`` smallest slacks
    ``c row . u - h``.  When the rows sum to zero, the ``k`` largest ``h``.
    """
    u = rows.row_sum()
    nu = float(np.linalg.norm(u))
    if not np.isfinite(nu) or nu == 0.0:
        return np.argpartition(-h, k - 1)[:k]
    au = rows.values(u / nu)
    pos = au > 1e-12 * max(1.0, float(np.abs(au).max()))
    ratio = h[pos] / au[pos]
    scale = float(ratio.max()) if ratio.size and ratio.max() > 0 else 1.0
    slack = scale * au - h
    return np.argpartition(slack, k - 1)[:k]


def solve(problem, tol, max_iter, be, verbose, callback=None):
    """The "nnls" method: key-score programs without equalities, by least distance.

    Declines (None) other programs and those of more than ``MAX_DIM`` (2000)
    parameters.  At most ``max(_WS_INITIAL, 2 (d + 1))`` constraints (``_WS_INITIAL =
    300``): one :func:`solve_ldp` of the whole program.  More: a working set ``W``,
    first the ``_WS_INITIAL`` rows of :func:`_initial_working_set`; each round solves
    the LDP on ``W``, stops when no row outside ``W`` is violated beyond ``max(1e-9
    scale, the violation on W)`` (``scale = max(1, max |h|)``), else keeps the rows of
    ``W`` with positive multipliers and adds the ``min(2 (d + 1), m - |keep|)`` other
    rows of smallest ``g_i x - h_i``; at most ``_WS_MAX_ROUNDS`` (500) rounds.
    ``n_iter`` is the number of LDP solves.  An answer that violates a constraint by
    more than ``1e-6 scale`` is declined.
    """
    c = problem.constraints
    if not isinstance(problem.scores, KeyScores) or c.equality.any():
        return None
    if int(np.prod(problem.shape)) > MAX_DIM:
        return None
    m, d = len(c), int(np.prod(problem.shape))
    h = c.rhs
    scale = max(1.0, float(np.abs(h).max())) if m else 1.0
    rows = KeyRows(problem)
    n_rounds = 1
    if m <= max(_WS_INITIAL, 2 * (d + 1)):
        solved = solve_ldp_checked(rows.rows(), h, problem)
        if solved is None:
            return None
        x, lam = solved
        vals = rows.values(x) - h
    else:
        # working-set (cutting-plane) LDP: solve on W, keep the constraints
        # with positive multipliers, add the most violated ones.  The optimal
        # value grows strictly each round (the kept constraints fix the old
        # optimum, a violated one cuts it off), so no working set repeats; at
        # a point feasible for all constraints the working-set multipliers
        # (zero elsewhere) are dual feasible with the same value: optimal.
        work = np.sort(_initial_working_set(rows, h, _WS_INITIAL))
        for rnd in range(1, _WS_MAX_ROUNDS + 1):
            n_rounds = rnd
            try:
                solved = solve_ldp_checked(rows.rows(work), h[work], problem)
            except NotSeparableError as exc:  # the working set's ray, on every row
                if exc.ray is not None:
                    ray = np.zeros(m)
                    ray[work] = exc.ray
                    exc.ray = ray
                raise
            if solved is None:
                return None
            x, lam_w = solved
            solved_set = work
            vals = rows.values(x) - h
            # stop when no constraint outside W is violated beyond 1e-9 * scale
            # or beyond the NNLS's own accuracy on W (a large ||x||)
            slack = vals.copy()
            slack[work] = np.inf
            if -slack.min() <= max(1e-9 * scale, -vals[work].min()):
                break
            # next working set: the constraints with positive multipliers and
            # the 2 (d + 1) others of smallest value (the most violated first)
            keep = work[lam_w > 0]
            slack[work] = vals[work]
            slack[keep] = np.inf
            n_add = min(2 * (d + 1), m - keep.size)
            if n_add <= 0:
                break
            work = np.union1d(keep, np.argpartition(slack, n_add - 1)[:n_add])
        lam = np.zeros(m)
        lam[solved_set] = lam_w
    viol = float(np.maximum(-vals, 0.0).max()) if m else 0.0
    if viol > 1e-6 * scale:  # NNLS failed to reach its optimality conditions
        return None
    sq = float(x @ x)
    gap = (sq - float(h @ lam)) / sq if sq > 0 else 0.0
    return MaxMarginResult(
        primal=x.reshape(problem.shape), dual=lam, method="nnls", status="optimal",
        n_iter=n_rounds, gap=float(gap), max_violation=viol,
    )

