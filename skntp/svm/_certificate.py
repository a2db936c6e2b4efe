"""The certificate of a max-margin answer, recomputed from the program itself.

Every method of :func:`~skntp.svm.solve_max_margin` returns a primal point ``w``
and multipliers ``lam``.  Whatever the method reports, the status of the answer
is decided here, from the program's own rows and nothing the method computed:

* the **violation**: the largest ``max(r_k - a_k^T w, 0)`` over inequality rows
  and ``|a_k^T w - r_k|`` over equality rows, measured against the floating-point
  error of the row itself (``~ eps sum_i |a_ki| |w_i|``, so the test is relative
  to the data's scale);
* the **duality gap, with its sign**: for any multipliers with ``lam >= 0`` on the
  inequalities, weak duality gives the lower bound

  .. math::

      \\|w^\\star\\| \\;\\ge\\; \\mathrm{LB}(\\lambda)
      = \\frac{r^T\\lambda}{\\|A^T\\lambda\\|_*}

  (``||.||_*`` the dual norm; for the Frobenius program this is the value of the
  dual of the module docstring of :mod:`skntp.svm._problem` at the best scaling of
  ``lam``), and the relative gap is ``(||w|| - LB) / ||w||``.  A feasible ``w``
  has a gap ``>= 0``; a *negative* gap says that ``w`` lies below a lower bound
  on the optimum, which only a point that violates the rows can;
* the **norm value** ``||w||`` in the program's norm.

An answer is ``"optimal"`` only when the violation is within ``tol`` (relative to
the right-hand sides, above the rounding floor) and ``|gap| <= tol``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .._backend import get_backend
from ._norms import dual_norm, norm_value
from ._problem import Constraints

#: rounding floors, in units of the float64 epsilon: a row's violation is not
#: resolved below ``ROW_ULPS * eps * sum_i |a_ki w_i|``, a relative gap below
#: ``GAP_ULPS * eps`` (the methods' own stopping rules use the same floors)
ROW_ULPS = 1e3
GAP_ULPS = 1e3
_EPS = float(np.finfo(np.float64).eps)

#: what a status says (``MaxMarginResult.status``)
STATUSES = {
    "optimal": "certified: violation and |duality gap| within tol",
    "optimal_inaccurate": "feasible within tol, but the duality gap exceeds tol",
    "infeasible_point": "the point violates the rows beyond tol, or lies below the "
                        "dual bound (a negative gap beyond tol)",
    "max_iter": "the method ran out of iterations before its answer could be certified",
}

_SCORE_ARRAYS = ("queries", "outputs", "output_scale", "keys", "tokens")


def _absolute_scores(scores):
    """The same score map with every array replaced by its absolute value."""
    new = object.__new__(type(scores))
    new.__dict__.update(scores.__dict__)
    for name in _SCORE_ARRAYS:
        a = getattr(scores, name, None)
        if a is not None:
            new.__dict__[name] = np.abs(a)
    return new


def row_magnitudes(problem, w):
    """``sum_i |a_ki| |w_i|`` for every row ``k`` (the scale of its rounding error)."""
    c = problem.constraints
    be = get_backend("numpy")
    scores = _absolute_scores(problem.scores)
    absw = np.abs(np.asarray(w, dtype=float))
    minus = np.full(len(c), -1, dtype=np.int64)
    zeros, no = np.zeros(len(c)), np.zeros(len(c), dtype=bool)
    first = replace(problem, scores=scores,
                    constraints=Constraints(c.block, c.pos, minus, zeros, no))
    out = np.asarray(first.operators(be)[0](absw), dtype=float)
    two = c.ref >= 0
    if two.any():
        second = replace(problem, scores=scores, constraints=Constraints(
            c.block[two], c.ref[two], minus[two], zeros[two], no[two]))
        out[two] += np.asarray(second.operators(be)[0](absw), dtype=float)
    return out


def certificate(problem, w, dual):
    """The certificate of ``(w, dual)`` for ``problem``, recomputed from its rows.

    Parameters
    ----------
    problem : MaxMarginProblem
    w : ndarray with the problem's shape
    dual : ndarray of shape (n_constraints,)
        Multipliers; their sign on inequality rows is clipped to ``>= 0``.

    Returns
    -------
    dict
        ``violation`` (the largest row violation), ``excess`` (the largest
        violation beyond each row's rounding floor, relative to the right-hand
        sides' scale), ``gap`` (signed relative gap), ``objective`` (``||w||``)
        and ``bound`` (the dual lower bound ``LB``).
    """
    c = problem.constraints
    w = np.asarray(w, dtype=float).reshape(problem.shape)
    values, dual_to_primal = problem.operators(get_backend("numpy"))
    vals = np.asarray(values(w), dtype=float) - c.rhs
    viol = np.where(c.equality, np.abs(vals), np.maximum(-vals, 0.0))
    floor = ROW_ULPS * _EPS * row_magnitudes(problem, w)
    rscale = float(np.max(np.abs(c.rhs), initial=0.0)) or 1.0
    excess = float(np.max(viol - floor, initial=0.0)) / rscale
    lam = np.where(c.equality, dual, np.maximum(np.asarray(dual, dtype=float), 0.0))
    M = np.asarray(dual_to_primal(lam), dtype=float).reshape(problem.shape)
    size = norm_value(w, problem.norm)
    dual_size = norm_value(M, dual_norm(problem.norm))
    rl = float(c.rhs @ lam)
    bound = rl / dual_size if (dual_size > 0 and rl > 0) else 0.0
    if size > 0:
        gap = (size - bound) / size
    else:  # w = 0 is optimal only when no positive bound exists
        gap = 0.0 if bound == 0.0 else -math.inf
    return {"violation": float(viol.max(initial=0.0)), "excess": max(excess, 0.0),
            "gap": float(gap), "objective": float(size), "bound": float(bound)}


def certify(problem, result, tol):
    """Set ``result``'s status, gap and violation from :func:`certificate`.

    ``"optimal"`` needs the violation beyond the rounding floor at most ``tol``
    (relative to the right-hand sides) and ``|gap| <= max(tol, GAP_ULPS eps)``.
    Otherwise: ``"max_iter"`` if the method said so, else ``"infeasible_point"``
    (violation, or a gap below ``-tol``) or ``"optimal_inaccurate"`` (a gap above
    ``tol``).  Returns ``result``, its fields ``gap``, ``max_violation``,
    ``objective`` and ``bound`` replaced by the recomputed ones.
    """
    cert = certificate(problem, result.primal, result.dual)
    gtol = max(tol, GAP_ULPS * _EPS)
    feasible = cert["excess"] <= tol
    if feasible and abs(cert["gap"]) <= gtol:
        status = "optimal"
    elif result.status == "max_iter":
        status = "max_iter"
    elif not feasible or cert["gap"] < -gtol:
        status = "infeasible_point"
    else:
        status = "optimal_inaccurate"
    result.status = status
    result.gap = cert["gap"]
    result.max_violation = cert["violation"]
    result.objective = cert["objective"]
    result.bound = cert["bound"]
    return result
