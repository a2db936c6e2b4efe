"""The library methods ``"cvxpy"`` (Clarabel) and ``"scs"`` (SCS): the program as a
conic program.

``"cvxpy"``: every norm of :data:`skntp.svm.NORMS` and every ``("lp", p)``: cvxpy
writes the Frobenius program as a second-order-cone program, the max and l1
programs as linear programs, the nuclear and spectral programs as semidefinite
programs and the lp programs with power cones; Clarabel, an interior-point
method, solves them.  It is the reference the tests compare every other method
with, and the last method ``auto`` tries.

``"scs"``: the same semidefinite form of a nuclear-norm program, solved by SCS
(an operator-splitting method: one eigendecomposition of the ``(k + d)``-square
cone variable per iteration, where Clarabel factors a system in the constraints)
to ``eps_abs = eps_rel = min(1e-10, tol / 100)``; the certificate of the
dispatcher decides whether the answer is optimal.  On the logit-space NTP-SVM of
NTP-UFM (:func:`~skntp.svm.ntp_logit_svm`, m = V = 60) it is certified in 2.3 s
where Clarabel takes 467 s in the same run (``benchmarks/README.md``, table "Logit
NTP-SVM").
"""

from __future__ import annotations

import warnings

import cvxpy as cp
import numpy as np
from sklearn.exceptions import ConvergenceWarning

from ..._warnings import user_stacklevel
from .._norms import MATRIX_NORMS, norm_gap, norm_kind
from .._problem import BilinearScores, MaxMarginResult, NotSeparableError, check_program_size

__all__ = ["CONIC_BYTES_PER_NONZERO", "CONIC_BYTES_PER_VARIABLE_PAIR", "check_conic_size",
           "logit_svm_compact", "solve", "solve_scs"]

#: Memory that cvxpy and the solver need per nonzero of the constraint matrix (cvxpy's
#: canonicalization keeps several copies of it) and per pair of variables (the factor of
#: the solver's KKT system, dense on the variables when every row couples them).  Set
#: above the peak RSS of Clarabel on NTP-SVMs of the separable rows of real text (1.1 to
#: 9.5 million nonzeros, 4,400 to 10,240 variables, 0.35 to 2.49 GB: the estimate is 1.12
#: to 1.40 times the peak; ``benchmarks/conic_memory.py``); at 72 million nonzeros and
#: 37,248 variables (281,590 rows of real text, d = 128) Clarabel was killed for memory
#: at 24 GB, taking the user's process with it.
CONIC_BYTES_PER_NONZERO = 300
CONIC_BYTES_PER_VARIABLE_PAIR = 6


def solve(problem, tol, max_iter, be, verbose, callback=None):
    """Clarabel (method ``"cvxpy"``)."""
    return _solve(problem, tol, max_iter, verbose, "clarabel")


def solve_scs(problem, tol, max_iter, be, verbose, callback=None):
    """SCS (method ``"scs"``), for nuclear-norm programs."""
    if problem.norm != "nuclear":
        return None
    return _solve(problem, tol, max_iter, verbose, "scs")


def _constraint_nonzeros(problem):
    """The nonzeros of :meth:`~skntp.svm.MaxMarginProblem.constraint_matrix`, without
    building it where the scores say (linear-decoder rows: one context per token)."""
    c, sc = problem.constraints, problem.scores
    if isinstance(sc, BilinearScores) and sc.outputs is None:
        return (len(c) + int(np.count_nonzero(c.ref >= 0))) * sc.shape[1]
    return problem.constraint_matrix().nnz


def check_conic_size(problem):
    """Raise :class:`~skntp.svm.ProgramTooLargeError` when the conic form of ``problem``
    would not fit in memory (:data:`CONIC_BYTES_PER_NONZERO`,
    :data:`CONIC_BYTES_PER_VARIABLE_PAIR`), before cvxpy allocates it: past the memory
    the solver aborts the process, or the system kills it."""
    n_var = int(np.prod(problem.shape))
    need = (CONIC_BYTES_PER_NONZERO * float(_constraint_nonzeros(problem))
            + CONIC_BYTES_PER_VARIABLE_PAIR * float(n_var) ** 2)
    n = max(len(problem.constraints), 1)
    check_program_size(problem.name, n,
                       f"cvxpy's conic form has a factor dense in the {n_var} variables; use "
                       "a first-order method ('dcd', 'accelerated-dual') or method='auto'.",
                       bytes_per_constraint=need / n)


def _solve(problem, tol, max_iter, verbose, solver):
    check_conic_size(problem)
    c = problem.constraints
    A = problem.constraint_matrix()
    n_var = int(np.prod(problem.shape))
    nuclear = problem.norm in MATRIX_NORMS
    if nuclear:
        W = cp.Variable(problem.shape)
        w = cp.vec(W, order="C")
        objective = cp.normNuc(W) if problem.norm == "nuclear" else cp.sigma_max(W)
    elif norm_kind(problem.norm) == "lp":
        w = cp.Variable(n_var)
        # cvxpy writes pnorm with a rational p (exact for the p of the tests)
        objective = cp.pnorm(w, problem.norm[1])
    else:
        w = cp.Variable(n_var)
        objective = {"fro": 0.5 * cp.sum_squares(w), "max": cp.norm(w, "inf"),
                     "l1": cp.norm1(w)}[problem.norm]
    cons = []
    ineq, eq = ~c.equality, c.equality
    if ineq.any():
        cons.append(A[ineq] @ w >= c.rhs[ineq])
    if eq.any():
        cons.append(A[eq] @ w == c.rhs[eq])
    prob = cp.Problem(cp.Minimize(objective), cons)
    try:
        with warnings.catch_warnings():
            # cvxpy's "Solution may be inaccurate" points into skntp; the dispatcher's
            # certificate says whether the answer is
            warnings.filterwarnings("ignore", message="Solution may be inaccurate",
                                    category=UserWarning)
            _run(prob, solver, tol, max_iter, verbose)
    except cp.error.SolverError as exc:  # pragma: no cover - solver crash
        name = {"scs": "SCS", "clarabel": "Clarabel"}[solver]
        raise RuntimeError(f"{problem.name}: {name} failed: {exc}") from exc
    status = prob.status
    if status in (cp.INFEASIBLE, cp.INFEASIBLE_INACCURATE):
        # a claim: cvxpy's duals are then the solver's certificate of infeasibility,
        # which the dispatcher checks from the rows
        exc = NotSeparableError(
            f"{problem.name} is infeasible (solver status {status!r}): "
            f"{problem.infeasible_message}."
        )
        exc.ray = _duals(cons, c, ineq, eq)
        raise exc
    if status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE):
        raise RuntimeError(f"{problem.name}: cvxpy returned status {status!r}.")
    if status == cp.OPTIMAL_INACCURATE and solver == "clarabel":
        warnings.warn(
            f"{problem.name}: cvxpy returned status 'optimal_inaccurate'; the "
            "solution may be imprecise.",
            ConvergenceWarning,
            stacklevel=user_stacklevel(),
        )
    wv = np.asarray(w.value, dtype=float)
    dual = _duals(cons, c, ineq, eq)
    if nuclear:
        wv = np.asarray(W.value, dtype=float).ravel()
    if problem.norm != "fro":
        gap, dual = norm_gap(problem, wv.reshape(problem.shape), dual, A)
    else:
        sq = float(wv @ wv)
        gap = (sq - float(c.rhs @ dual)) / sq if sq > 0 else 0.0
    vals = A @ wv - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    stats = prob.solver_stats
    return MaxMarginResult(
        primal=wv.reshape(problem.shape),
        dual=dual,
        method="cvxpy" if solver == "clarabel" else "scs",
        status=status,
        n_iter=int(stats.num_iters or 0) if stats is not None else 0,
        gap=float(gap),
        max_violation=float(viol.max()) if viol.size else 0.0,
    )


def _duals(cons, c, ineq, eq):
    """The multipliers of the rows from cvxpy's constraints (``None`` if it has none)."""
    dual = np.zeros(len(c))
    try:
        if ineq.any():
            dual[ineq] = np.asarray(cons[0].dual_value, dtype=float).ravel()
        if eq.any():
            dual[eq] = -np.asarray(cons[-1].dual_value, dtype=float).ravel()
    except (TypeError, ValueError):  # no dual values
        return None
    return dual


def _run(prob, solver, tol, max_iter, verbose):
    if solver == "scs":
        # SCS's residuals are on its own scaling: a hundredth of ``tol`` (measured:
        # certified gaps of 3e-11 to 3e-10 at 1e-10 on the logit NTP-SVM); the
        # certificate decides
        eps = min(1e-10, 0.01 * tol)
        prob.solve(solver=cp.SCS, verbose=bool(verbose), eps_abs=eps, eps_rel=eps,
                   max_iters=int(max_iter))
    else:
        _solve_clarabel(prob, tol, verbose)


def _solve_clarabel(prob, tol, verbose):
    # Clarabel's default gap and feasibility tolerances (1e-8) are on its own
    # scaling; a tenth of ``tol`` leaves room for the certificate (recomputed).
    # Where that is beyond its reach, its defaults, and the certificate decides.
    ctol = max(0.1 * tol, 1e-10)
    try:
        prob.solve(solver=cp.CLARABEL, verbose=bool(verbose), tol_gap_abs=ctol,
                   tol_gap_rel=ctol, tol_feas=ctol)
    except cp.error.SolverError:
        prob.solve(solver=cp.CLARABEL, verbose=bool(verbose))


def logit_svm_compact(inside, n_tok, n_ctx, tol, max_iter, verbose):
    """The logit NTP-SVM over classes of equal tokens and contexts, compact, by SCS.

    One variable per token class and context class, ``K`` (``a x c``), one
    in-support level ``l_c`` per context class: ``K[a, c] = l_c`` on the
    supports, ``K[a, c] <= l_c - 1`` off them, ``min ||D_t^{1/2} K D_c^{1/2}||_*``
    (the merged program of :func:`~skntp.svm.ntp_logit_svm`, ``D_t``, ``D_c`` the
    class sizes), to ``eps_abs = eps_rel = min(1e-10, tol / 100)``.  Cheaper than
    the anchored rows of the program: cvxpy writes two elementwise blocks instead
    of ``m (V - 1)`` sparse rows.

    Parameters
    ----------
    inside : ndarray of shape (a, c), bool
        The supports of the classes (token class in the support of context class).
    n_tok, n_ctx : ndarray of shape (a,) and (c,)
        The class sizes.
    tol : float
    max_iter : int
    verbose : int

    Returns
    -------
    (K, M, n_iter) or None
        The class logits, the multipliers of the two constraint blocks (on the
        supports and off them, one ``a x c`` array), SCS's iterations; ``None``
        when SCS fails or reports no solution.
    """
    a, c = inside.shape
    K, level = cp.Variable((a, c)), cp.Variable(c)
    shifted = K - np.ones((a, 1)) @ cp.reshape(level, (1, c), order="C")
    ins = inside.astype(float)
    cons = [cp.multiply(ins, shifted) == 0, cp.multiply(1 - ins, shifted + 1) <= 0]
    weights = np.sqrt(np.outer(n_tok, n_ctx))
    scaled = K if np.all(weights == 1) else cp.multiply(weights, K)
    prob = cp.Problem(cp.Minimize(cp.normNuc(scaled)), cons)
    eps = min(1e-10, 0.01 * tol)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prob.solve(solver=cp.SCS, eps_abs=eps, eps_rel=eps, max_iters=int(max_iter),
                       verbose=bool(verbose))
    except cp.error.SolverError:  # pragma: no cover - solver crash
        return None
    if prob.status not in (cp.OPTIMAL, cp.OPTIMAL_INACCURATE) or K.value is None:
        return None
    M = np.where(inside, cons[0].dual_value, 0.0) + np.where(inside, 0.0, cons[1].dual_value)
    stats = prob.solver_stats
    n_iter = int(stats.num_iters or 0) if stats is not None else 0
    return np.asarray(K.value), M, n_iter
