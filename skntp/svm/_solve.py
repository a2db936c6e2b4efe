"""The dispatcher: :func:`solve_max_margin` solves a :class:`MaxMarginProblem` by
a method of :mod:`skntp.svm.solvers` and certifies the answer itself
(:mod:`skntp.svm._certificate`); :func:`solve_min_norm` solves equalities alone.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import replace

import numpy as np
from scipy.sparse.linalg import lsqr
from sklearn.exceptions import ConvergenceWarning

from .._backend import blas_threads, get_backend, to_numpy
from .._warnings import reemit, user_stacklevel
from ._certificate import FARKAS_MARGIN, certify
from ._norms import norm_kind, norm_label
from ._problem import (
    BilinearScores,
    KeyScores,
    MaxMarginResult,
    NotSeparableError,
    ProgramTooLargeError,
    QueryKeyScores,
    UndecidedError,
    constraint_operator,
)
from .solvers import AUTO_ORDER, METHODS

_log = logging.getLogger("skntp.svm")

__all__ = ["DEFAULT_TOL", "frobenius_solution", "program_class", "solve_max_margin",
           "solve_min_norm"]


def program_class(problem):
    """The class of a program for ``method="auto"``: "decoder", "decoder-partial",
    "keys", "bilinear", "nuclear", "lp", "spectral" or "lp-norm"."""
    if problem.norm in ("nuclear", "spectral"):
        return problem.norm
    if problem.norm in ("max", "l1"):
        return "lp"
    if norm_kind(problem.norm) == "lp":
        return "lp-norm"
    scores = problem.scores
    while hasattr(scores, "base"):  # GatheredScores
        scores = scores.base
    if isinstance(scores, KeyScores):
        return "keys"
    if isinstance(scores, BilinearScores) and scores.outputs is None:
        return "decoder-partial" if "separability" in problem.info else "decoder"
    return "bilinear"



def solve_max_margin(
    problem,
    *,
    method="auto",
    tol=None,
    max_iter=100_000,
    backend="numpy",
    device=None,
    dtype="float64",
    verbose=0,
    callback=None,
):
    """Solve ``min 1/2 ||w||^2`` (or ``min ||w||`` in ``problem.norm``) under the
    problem's constraints.

    Parameters
    ----------
    problem : MaxMarginProblem
    method : str, default="auto"
        A method of :data:`skntp.svm.solvers.METHODS`: ``"cvxpy"`` (Clarabel,
        the reference path), ``"dcd"``, ``"accelerated-dual"``, ``"dual-active-set"``,
        ``"nnls"``, ``"graph-ldp"``; ``"nuclear-ipm"`` and ``"highs"`` for the
        nuclear, max and l1 norms; ``"lp-ipm"`` for the max norm of
        linear-decoder scores; ``"spectral-barrier"`` and ``"pnorm-barrier"``
        for the spectral and lp norms.  Or ``"auto"``: the methods of
        :data:`skntp.svm.solvers.AUTO_ORDER` for the program's class, in order.
        A method is never given a program in a norm it does not minimize
        (``ValueError``).
    tol : float, default=None
        The certificate's tolerance: relative duality gap (in absolute value) and
        constraint violation (relative to the right-hand sides, above each row's
        rounding floor); below ``1000 eps`` the gap is held to that floor.  ``None``:
        :data:`DEFAULT_TOL` for the program's norm (``1e-8``; ``1e-6`` for the
        spectral norm, whose programs float64 does not certify closer: the barrier
        method stops at gaps of 2e-8 to 1e-7, Clarabel's semidefinite form near 1e-5).
    max_iter : int, default=100_000
    backend, device, dtype :
        Array layer for iterative methods (see :func:`skntp._backend.get_backend`).
        The solve always runs in float64: ``dtype="float32"`` (an estimator's
        training precision) is accepted and upcast, since float32 cannot
        certify the default ``tol``.
    verbose : int, default=0
    callback : callable, optional
        ``callback(n_iter, gap, violation)``, called by iterative methods at
        each certificate check (relative duality gap and largest constraint
        violation of the current iterate), e.g. to drive a progress bar, and
        once more with the returned result's figures.

    Returns
    -------
    MaxMarginResult
        With NumPy arrays.

    Raises
    ------
    NotSeparableError
        If the program is infeasible (the message names the program and what
        that means for the data).

    Notes
    -----
    The program is homogeneous in the score map: scaling it by ``alpha``
    scales the solution by ``1 / alpha`` and the multipliers by
    ``1 / alpha^2``.  A map of magnitude outside ``[1e-4, 1e4]`` is scaled to
    unit magnitude, solved, and the answer scaled back, so every method sees
    well-scaled numbers whatever the units of the data (``1e-150`` to
    ``1e150`` and beyond).  A program that ``w = 0`` satisfies (no rows, or
    inequalities of rhs ``<= 0`` and equalities of rhs 0) has the optimum
    ``w = 0`` in every norm; it is answered without a method (``method="trivial"``).
    """
    if tol is None:
        tol = DEFAULT_TOL.get(norm_kind(problem.norm), 1e-8)
    _check_solver_options(tol, max_iter)
    c = problem.constraints
    if not np.any(c.rhs[c.equality]) and not np.any(c.rhs[~c.equality] > 0):
        # w = 0 is feasible (no row, or rows ">= rhs <= 0" and "= 0" only), hence optimal
        # in any norm
        return MaxMarginResult(
            primal=np.zeros(problem.shape),
            dual=np.zeros(len(c)),
            method="trivial",
            status="optimal",
            gap=0.0,
            max_violation=0.0,
        )
    # Explicit programs are always solved in float64 (on the requested backend
    # and device): their answers are certified to ``tol`` (1e-8 by default),
    # beyond float32's precision, where iterative methods would run to
    # max_iter without converging.  An estimator's float32 is for its training loop.
    get_backend(backend, device, dtype)  # validates the request
    be = get_backend(backend, device, "float64")
    alpha = _unit_scale(problem.scores, problem.name)
    if alpha != 1.0 or getattr(problem.scores, "unbalanced", lambda: False)():
        scaled = _scaled_problem(problem, alpha)
        try:
            result = solve_max_margin(scaled, method=method, tol=tol, max_iter=max_iter,
                                      backend=backend, device=device, dtype=dtype,
                                      verbose=verbose, callback=callback)
        except NotSeparableError as exc:
            # (Farkas multipliers do not depend on the scale of the rows)
            if exc.result is not None:
                exc.result.primal = np.zeros(problem.shape)
            raise
        return _scale_back(problem, result, alpha)
    if method == "auto":
        names = list(AUTO_ORDER[program_class(problem)])
    else:
        if method not in METHODS:
            raise ValueError(
                f"unknown max-margin method {method!r}; choose from "
                f"{sorted(METHODS) + ['auto']}."
            )
        kind = norm_kind(problem.norm)
        if kind not in METHODS[method].norms:
            able = sorted(n for n, m in METHODS.items() if kind in m.norms)
            raise ValueError(
                f"method {method!r} minimizes the {' or '.join(METHODS[method].norms)} "
                f"norm, not the {norm_label(problem.norm)} norm of {problem.name}; use "
                f"one of {able + ['auto']}.")
        names = [method]
    proof = _proof(problem)
    if proof is not None:
        return _infeasible(problem, proof, "")
    _log_program(problem, names)
    answers = []  # (result, the warnings its method raised, what the method said)
    crashes = []
    for name in names:
        func = METHODS[name].solve
        # a method that sets its own BLAS threads (``func.blas_threads``: 1, or None
        # for the library's pool) is not limited by the size of the score map
        own = getattr(func, "blas_threads", False)
        size = ((0 if own == 1 else np.inf) if own is not False
                else getattr(problem.scores, "work_size", np.inf))
        t0 = time.perf_counter()
        said = ""
        with blas_threads(size, be), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                extra = {"frobenius": frobenius_solution} if METHODS[name].frobenius else {}
                result = func(problem, tol, max_iter, be, verbose, callback, **extra)
            except NotSeparableError as exc:
                # a claim: its multipliers (the method's own, or the certificate of the
                # Frobenius program it solved on the same rows) are checked below
                ray = exc.ray if exc.ray is not None else (
                    None if exc.result is None else exc.result.dual)
                result = MaxMarginResult(primal=np.zeros(problem.shape),
                                         dual=None if ray is None else to_numpy(ray),
                                         method=name, status="infeasible")
                said = str(exc)
            except UndecidedError as exc:
                # the Frobenius program on the same rows, left undecided: so is this
                result = MaxMarginResult(primal=np.zeros(problem.shape), dual=None,
                                         method=name, status="undecided",
                                         margin_bound=min((r.margin_bound for r in exc.results),
                                                          default=np.inf))
                said = str(exc)
            except (RuntimeError, ProgramTooLargeError) as exc:
                # a solver that fails outright (not infeasibility: that is a claim,
                # checked below), or whose program would not fit in memory, does not
                # cost "auto" the other methods: the first failure is raised only when
                # no method answered at all
                if method != "auto":
                    raise
                crashes.append(exc)
                _log.info("%s (%s) %s: %s", problem.name, name,
                          "declined" if isinstance(exc, ProgramTooLargeError) else "failed",
                          exc)
                continue
        if result is None:  # declined
            reemit(caught)
            continue
        result.primal = to_numpy(result.primal)
        result.dual = None if result.dual is None else to_numpy(result.dual)
        if result.status != "undecided":
            certify(problem, result, tol)
        _log.info("%s (%s): %s in %.2f s (gap %.2e, violation %.2e)", problem.name, name,
                  result.status, time.perf_counter() - t0, result.gap, result.max_violation)
        answers.append((result, caught, said))
        if result.status in ("optimal", "infeasible") or method != "auto":
            break
        # "auto": an answer that is not certified has not decided the program; the
        # next method of the list does
        if verbose:
            print(f"[{problem.name}] method {name!r}: {result.status} (gap {result.gap:.2e},"
                  f" violation {result.max_violation:.2e}); trying the next method")
    if not answers:
        if crashes:
            raise crashes[0]
        which = "" if method == "auto" else f" (method {method!r} declines it)"
        raise ValueError(f"no max-margin method accepts the problem {problem.name}{which}.")
    decided = [a for a in answers if a[0].status in ("optimal", "infeasible")]
    points = [a for a in answers if a[0].status != "undecided"]
    if not decided and not points:
        reemit(w for a in answers for w in a[1]
                if not issubclass(w.category, ConvergenceWarning))
        tried = "; ".join(f"{r.method!r}: {said or 'infeasible'} (its multipliers bound the "
                          f"normalized margin by {r.margin_bound:.2e} only)"
                          for r, _, said in answers)
        exc = UndecidedError(
            f"{problem.name}: undecided. Every method tried called the program infeasible, "
            f"and none of their multipliers is a Farkas certificate that bounds the "
            f"normalized margin by {FARKAS_MARGIN:g} ({tried}). Neither a solution nor "
            "infeasibility can be reported; pass another method, or rescale or "
            "reparametrize the data (e.g. an orthonormal basis of the contexts' span).")
        exc.results = tuple(r for r, _, _ in answers)
        raise exc
    result, caught, said = decided[-1] if decided else min(
        points, key=lambda a: _uncertainty(a[0], tol))
    if result.status == "infeasible":
        reemit(w for w in caught if not issubclass(w.category, ConvergenceWarning))
        return _infeasible(problem, result, said)
    # the methods' own convergence warnings give way to the certificate's verdict (which
    # quotes them when the answer is not certified)
    quoted = [str(w.message) for w in caught if issubclass(w.category, ConvergenceWarning)]
    reemit(w for w in caught if not issubclass(w.category, ConvergenceWarning))
    if result.status != "optimal":
        tried = ", ".join(f"{r.method!r}: {r.status}" for r, _, _ in answers)
        quoted = "".join(f" The method said: {m}" for m in quoted)
        warnings.warn(
            f"{problem.name}: no answer could be certified ({tried}); returning the one of "
            f"method {result.method!r}, status {result.status!r}: relative duality gap "
            f"{result.gap:.2e}, largest constraint violation {result.max_violation:.2e} "
            f"(tol={tol:g}). Increase max_iter, or pass another method.{quoted}",
            ConvergenceWarning, stacklevel=user_stacklevel())
    if callback is not None:  # the final certificate, whatever the method
        callback(result.n_iter, result.gap, result.max_violation)
    return result


def _proof(problem):
    """The problem's own proof of infeasibility (``problem.infeasibility_proof``), as
    a certified result, or ``None`` (no proof, or its multipliers do not certify)."""
    if problem.infeasibility_proof is None:
        return None
    found = problem.infeasibility_proof()
    if found is None:
        return None
    message, multipliers = found
    result = certify(problem, MaxMarginResult(
        primal=np.zeros(problem.shape), dual=multipliers, method="proof",
        status="infeasible"), 0.0)
    if result.status != "infeasible":
        _log.info("%s: the proof of infeasibility (%s) did not certify (normalized margin "
                  "bound %.2e); the methods decide", problem.name, message,
                  result.margin_bound)
        return None
    result.method = message
    return result


def _infeasible(problem, result, said):
    """Raise :class:`NotSeparableError` for a certified ``"infeasible"`` result."""
    how = ("" if result.method in METHODS else f" {result.method}") + (
        f" (method {result.method!r}: {said})" if said else "")
    exc = NotSeparableError(
        f"{problem.name} is infeasible: {problem.infeasible_message}. Certified by Farkas "
        f"multipliers recomputed from the rows: every feasible point would have a "
        f"normalized margin below {result.margin_bound:.2e}.{how}")
    if result.method not in METHODS:
        result.method = "proof"
    c = problem.constraints
    result.dual = np.where(c.equality, result.dual, np.maximum(result.dual, 0.0))
    exc.result = result
    raise exc


def frobenius_solution(problem):
    """The Frobenius-norm program on the same constraints, solved by ``"auto"``.

    The constraints do not depend on the norm, and the Frobenius methods decide
    feasibility exactly (a Farkas ray): the methods registered with
    ``frobenius=True`` get this function to start from its solution or to
    certify that their program is infeasible (their own iterations diverge on
    it).  Key-query scores are solved on their lifted keys.

    Raises
    ------
    NotSeparableError
        When the constraints are infeasible.
    """
    scores = problem.scores
    if isinstance(scores, QueryKeyScores):
        scores = KeyScores(scores.lifted())
    return solve_max_margin(replace(problem, scores=scores, norm="fro"))


def _uncertainty(result, tol):
    """How far an answer is from certified (0 when it is): the largest of its
    violation and ``|gap|`` in units of ``tol``."""
    if result.status == "optimal":
        return 0.0
    t = max(tol, 1e-16)
    return max(result.max_violation / t, abs(result.gap) / t, 1.0)


#: programs with more constraint-row entries than this announce their size and the
#: methods tried at ``logging.INFO`` (logger ``"skntp.svm"``)
LOG_SIZE = 1_000_000


def _log_program(problem, names):
    n_rows = len(problem.constraints)
    n_var = int(np.prod(problem.shape))
    if n_rows * max(problem.shape[-1], 1) >= LOG_SIZE:
        _log.info("%s: %d constraints on %d variables (norm %s); methods %s", problem.name,
                  n_rows, n_var, norm_label(problem.norm), ", ".join(names))




#: the certificate's default tolerance of a norm (:func:`solve_max_margin`'s ``tol=None``)
DEFAULT_TOL = {"spectral": 1e-6}

#: Score maps of magnitude outside this range are solved at unit magnitude.
_WELL_SCALED = (1e-4, 1e4)


def _check_solver_options(tol, max_iter):
    if not (isinstance(tol, (int, float, np.floating, np.integer)) and np.isfinite(tol)
            and tol >= 0):
        raise ValueError(f"tol must be a finite number >= 0, got {tol!r}.")
    if not (isinstance(max_iter, (int, np.integer)) and not isinstance(max_iter, bool)
            and max_iter >= 1):
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}.")


def _unit_scale(scores, name="the program"):
    """``alpha`` that brings the map's magnitude to 1 (1.0 when already well scaled)."""
    with np.errstate(over="ignore", under="ignore"):
        mag = scores.magnitude() if hasattr(scores, "magnitude") else 1.0
    if mag == 0.0 or _WELL_SCALED[0] <= mag <= _WELL_SCALED[1]:
        return 1.0
    if not np.isfinite(mag) or mag < np.finfo(np.float64).smallest_normal:
        raise FloatingPointError(
            f"{name}: the data make scores of magnitude beyond float64 (a product of "
            "factors over 1e308 or under 1e-308), so the solution (about the inverse of "
            "that magnitude) cannot be represented; rescale the data (e.g. the embeddings "
            "to unit norm: the limits are scale-covariant).")
    return 1.0 / mag


def _scaled_problem(problem, alpha):
    # (the infeasibility proof runs on the scaled program: its rows are those of the
    # original divided by a constant, and so are its multipliers' images)
    return replace(problem, scores=problem.scores.rescaled(alpha))


def _scale_back(problem, result, alpha):
    """The original program's answer from the one with the map scaled by ``alpha``."""
    with np.errstate(over="ignore"):
        result.primal = result.primal * alpha
        # multipliers scale as 1/alpha^2 for 1/2 ||w||^2, as 1/alpha for the other norms
        result.dual = result.dual * alpha
        if problem.norm == "fro":
            result.dual = result.dual * alpha
        result.objective = result.objective * alpha
        result.bound = result.bound * alpha
    if not np.all(np.isfinite(result.primal)):
        raise FloatingPointError(
            f"{problem.name}: the solution overflows float64 (the data's scores have "
            f"magnitude {1.0 / alpha:.3g}, so the solution's entries are about "
            f"{alpha:.3g} times those of the unit-scale solution); rescale the data."
        )
    if not np.all(np.isfinite(result.dual)):
        warnings.warn(
            f"{problem.name}: the multipliers overflow float64 at this data scale "
            f"({1.0 / alpha:.3g}); they are reported as inf, the solution is exact.",
            RuntimeWarning, stacklevel=user_stacklevel())
    return result


def solve_min_norm(problem, *, tol=1e-13, max_iter=None, return_converged=False):
    """Minimum-norm (least-squares) solution of the problem's *equalities*.

    Solves ``min ||w||`` over the least-squares solutions of
    ``S_{b,a}(w) - S_{b,t}(w) = rhs`` with LSQR started at zero, which
    returns the minimum-norm solution; it lies in the row space of the
    constraints (for the NTP-SVM structure, in the subspace ``F`` of eq. (5)).

    Parameters
    ----------
    problem : MaxMarginProblem
        Equality constraints only.
    tol : float, default=1e-13
        LSQR's ``atol`` and ``btol``.  (A looser ``atol`` alone, LSQR's least-squares
        test ``||A^T r|| <= atol ||A|| ||r||``, would save iterations on unsolvable
        equations, but stops on solvable ill-conditioned ones above their zero
        residual: 10 equations of condition 1e4 stop at 6e-5 with ``atol=1e-3``.)
    max_iter : int, optional
        LSQR's iteration limit; by default 20 times the number of unknowns.
    return_converged : bool, default=False
        Also return whether LSQR stopped on a tolerance: not on ``max_iter``, nor on
        its estimate of the condition number (above ``1e8``, where its residual
        says nothing of the equations' solvability).

    Returns
    -------
    w : ndarray with the problem's shape
    relative_residual : float
        ``||A w - rhs|| / max(1, ||rhs||)``: ~0 when the equations are solvable.
    converged : bool
        Only with ``return_converged=True``.
    """
    c = problem.constraints
    if not c.equality.all():
        raise ValueError("solve_min_norm takes equality constraints only.")
    if len(c) == 0:
        return (np.zeros(problem.shape), 0.0) + ((True,) if return_converged else ())
    alpha = _unit_scale(problem.scores, problem.name)
    if alpha != 1.0:  # homogeneous in the map, as in solve_max_margin
        w, *rest = solve_min_norm(_scaled_problem(problem, alpha), tol=tol,
                                  max_iter=max_iter, return_converged=return_converged)
        w = w * alpha
        if not np.all(np.isfinite(w)):
            raise FloatingPointError(
                f"{problem.name}: the minimum-norm solution overflows float64; rescale "
                "the data.")
        return (w, *rest)
    op = constraint_operator(problem)
    n_var = op.shape[1]
    out = lsqr(op, c.rhs, atol=tol, btol=tol, iter_lim=max_iter or 20 * n_var)
    w = np.asarray(out[0]).reshape(problem.shape)
    res = float(np.linalg.norm(op.matvec(out[0]) - c.rhs)) / max(
        1.0, float(np.linalg.norm(c.rhs)))
    # (istop 3, 6: the condition number's limits; 7: the iteration limit)
    return (w, res) + ((out[1] in (0, 1, 2, 4, 5),) if return_converged else ())
