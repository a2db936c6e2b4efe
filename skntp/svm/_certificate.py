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

A **negative answer** is certified the same way, from the rows: multipliers
``lam`` (``>= 0`` on the inequalities, any sign on the equalities) with
``r^T lam > 0`` are a Farkas certificate when their image ``A^T lam`` vanishes.
For every ``w`` that meets the rows, ``r^T lam <= lam^T A w <= ||A^T lam|| ||w||``,
so the multipliers bound the *normalized margin* of every feasible point,

.. math::

    \\gamma(w) = \\frac{\\max_k r_k}{\\max_k \\|a_k\\| \\, \\|w\\|}
    \\;\\le\\; \\frac{\\max_k r_k \\,(\\|A^T\\lambda\\| + \\delta)}
    {\\max_k \\|a_k\\| \\; r^T\\lambda},

with ``delta`` the rounding bound of the computed ``A^T lam``
(``min(n + 4, ROW_ULPS) eps || |A|^T |lam| ||`` for ``n`` rows: the worst case of
sums of ``n`` terms, capped at the 1000 ulps of the violation test).
``"infeasible"`` means that bound is at most :data:`FARKAS_MARGIN`: no point meets
the rows with a normalized margin above ``1e-11``, within two orders of magnitude of
the resolution of a float64 row (a ``w`` of margin ``1e-13`` has row values at the
rounding floor of the violation test above; keys with a common offset leave the
computed image of the multipliers a rounding error that the bound carries).  A method that
claims infeasibility without such multipliers has not decided the program: its
answer is ``"undecided"`` (:func:`farkas_certificate`, :func:`polish_farkas`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog
from scipy.sparse.linalg import LinearOperator, lsqr

from .._backend import get_backend
from ._norms import dual_norm, norm_value
from ._problem import BilinearScores, Constraints

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
    "infeasible": "certified infeasible: Farkas multipliers, recomputed from the rows, bound "
                  "the normalized margin of every feasible point below FARKAS_MARGIN",
    "undecided": "the method called the program infeasible, but its multipliers (polished "
                 "or not) do not certify it",
}

#: The normalized margin (see the module docstring) below which verified Farkas
#: multipliers make a program ``"infeasible"``.
FARKAS_MARGIN = 1e-11

_SCORE_ARRAYS = ("queries", "outputs", "output_scale", "keys", "tokens")


def _absolute_scores(scores, power=1):
    """The same score map with every array replaced by its absolute value (``power=1``)
    or its square (``power=2``).  Every entry of a score's gradient is a product of one
    entry of each array, so the map of squares gives the squared gradients."""
    new = object.__new__(type(scores))
    new.__dict__.update(scores.__dict__)
    for name in _SCORE_ARRAYS:
        a = getattr(scores, name, None)
        if a is not None:
            new.__dict__[name] = np.abs(a) if power == 1 else np.square(a)
    return new


def _one_sided(problem, scores):
    """``(first, second, two)``: the rows' first scores and, where they have one, their
    reference scores, as one-score programs on ``scores`` (each row ``S[b, t]``)."""
    c = problem.constraints
    minus = np.full(len(c), -1, dtype=np.int64)
    zeros, no = np.zeros(len(c)), np.zeros(len(c), dtype=bool)
    first = replace(problem, scores=scores,
                    constraints=Constraints(c.block, c.pos, minus, zeros, no))
    two = c.ref >= 0
    second = replace(problem, scores=scores, constraints=Constraints(
        c.block[two], c.ref[two], minus[two], zeros[two], no[two])) if two.any() else None
    return first, second, two


def row_magnitudes(problem, w):
    """``sum_i |a_ki| |w_i|`` for every row ``k`` (the scale of its rounding error)."""
    be = get_backend("numpy")
    first, second, two = _one_sided(problem, _absolute_scores(problem.scores))
    absw = np.abs(np.asarray(w, dtype=float))
    out = np.asarray(first.operators(be)[0](absw), dtype=float)
    if second is not None:
        out[two] += np.asarray(second.operators(be)[0](absw), dtype=float)
    return out


def max_row_norm(problem):
    """``max_k ||a_k||_2``, the largest constraint row's norm, exactly.

    Linear-decoder rows (``BilinearScores`` without output embeddings) compare two
    tokens, whose coefficients sit on disjoint rows of ``W``: ``||a_k||^2 = (s_a^2 +
    s_t^2) ||q_b||^2``, from the squared map.  Other rows (keys, Graph-SVM's output
    embeddings) may cancel (``k_sel - k_t`` of keys with a common offset): their
    norms come from the rows themselves (:meth:`MaxMarginProblem.constraint_matrix`).
    An upper bound in their place would make Farkas certificates look stronger than
    they are.
    """
    c = problem.constraints
    if len(c) == 0:
        return 0.0
    scores = problem.scores
    if isinstance(scores, BilinearScores) and scores.outputs is None:
        be = get_backend("numpy")
        first, second, two = _one_sided(problem, _absolute_scores(scores, power=2))
        ones = np.ones(problem.shape)
        sq = np.asarray(first.operators(be)[0](ones), dtype=float)
        if second is not None:
            sq[two] += np.asarray(second.operators(be)[0](ones), dtype=float)
        return math.sqrt(float(np.max(sq)))
    A = problem.constraint_matrix().tocsr()
    return math.sqrt(float(np.max(np.asarray(A.multiply(A).sum(axis=1)))))


def _absolute_image(problem, lam):
    """``|A|^T |lam|`` (the scale of the rounding error of the computed ``A^T lam``)."""
    be = get_backend("numpy")
    first, second, two = _one_sided(problem, _absolute_scores(problem.scores))
    a = np.abs(np.asarray(lam, dtype=float))
    out = np.asarray(first.operators(be)[1](a), dtype=float)
    if second is not None:
        out = out + np.asarray(second.operators(be)[1](a[two]), dtype=float)
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


def farkas_certificate(problem, dual):
    """Check multipliers as a Farkas certificate that ``problem`` is infeasible.

    Parameters
    ----------
    problem : MaxMarginProblem
    dual : ndarray of shape (n_constraints,)
        Multipliers; their sign on inequality rows is clipped to ``>= 0``.

    Returns
    -------
    dict
        ``margin``: the bound on the normalized margin of every feasible point
        (module docstring; ``inf`` when ``r^T lam <= 0``), ``residual``
        (``||A^T lam||``), ``rounding`` (its rounding bound), ``rhs``
        (``r^T lam``) and ``certified`` (``margin <= FARKAS_MARGIN``).
    """
    c = problem.constraints
    lam = np.asarray(dual, dtype=float)
    lam = np.where(c.equality, lam, np.maximum(lam, 0.0))
    rl = float(c.rhs @ lam) if lam.size else 0.0
    out = {"margin": math.inf, "residual": math.inf, "rounding": math.inf, "rhs": rl,
           "certified": False}
    if not (rl > 0 and np.all(np.isfinite(lam))):
        return out
    lam = lam / rl  # (the bound is homogeneous in lam; this keeps it in range)
    _, dual_to_primal = problem.operators(get_backend("numpy"))
    residual = float(np.linalg.norm(np.asarray(dual_to_primal(lam), dtype=float)))
    # each entry of A^T lam sums at most one term per row (and the score map's own
    # products): the worst-case bound of such sums, capped at the ROW_ULPS convention
    ulps = min(ROW_ULPS, len(c) + 4)
    rounding = ulps * _EPS * float(np.linalg.norm(_absolute_image(problem, lam)))
    amag = max_row_norm(problem)
    rscale = float(np.max(np.abs(c.rhs)))
    # (rows that are all zero and a positive right-hand side: infeasible, margin 0)
    margin = (residual + rounding) * rscale / amag if amag > 0 else 0.0
    out.update(margin=margin, residual=residual * rl, rounding=rounding * rl,
               certified=bool(margin <= FARKAS_MARGIN))
    return out


#: Problems with at most this many constraint-matrix entries are polished densely.
POLISH_DENSE = 20_000_000


def polish_farkas(problem, dual, *, rounds=6, max_iter=5000):
    """Refine approximate Farkas multipliers (a method's diverging dual, a solver's ray).

    On the rows the multipliers use (every equality, the inequalities with a
    positive multiplier) the smallest correction that cancels ``A^T lam`` is a
    least-squares solve (dense ``lstsq`` when the rows fit in memory, else LSQR
    on the constraint operator); inequalities whose multiplier turns negative
    leave the set and the solve is repeated, at most ``rounds`` times.  The
    result is normalized to ``r^T lam = 1``; :func:`farkas_certificate` decides
    whether it certifies anything.

    Returns
    -------
    ndarray of shape (n_constraints,) or None
        ``None`` when the multipliers have no positive ``r^T lam``.
    """
    c = problem.constraints
    lam = np.asarray(dual, dtype=float).copy()
    lam[~c.equality] = np.maximum(lam[~c.equality], 0.0)
    rl = float(c.rhs @ lam) if lam.size else 0.0
    if not (rl > 0 and np.all(np.isfinite(lam))):
        return None
    lam /= rl
    n_var = int(np.prod(problem.shape))
    dense = len(c) * n_var <= POLISH_DENSE
    if dense:
        A = problem.constraint_matrix().toarray()
    else:
        values, dual_to_primal = problem.operators(get_backend("numpy"))
    for _ in range(rounds):
        use = c.equality | (lam > 0)
        idx = np.flatnonzero(use)
        if dense:
            e = A.T @ lam
            delta = np.linalg.lstsq(A[idx].T, -e, rcond=None)[0]
        else:
            e = np.ravel(dual_to_primal(lam))

            def matvec(x, idx=idx):
                full = np.zeros(len(c))
                full[idx] = x
                return np.ravel(dual_to_primal(full))

            op = LinearOperator((n_var, idx.size), matvec=matvec, dtype=float,
                                rmatvec=lambda y, idx=idx: np.asarray(
                                    values(np.reshape(y, problem.shape)))[idx])
            delta = lsqr(op, -e, atol=1e-15, btol=1e-15, iter_lim=max_iter)[0]
        new = lam.copy()
        new[idx] += delta
        negative = ~c.equality & (new < 0)
        lam = np.where(negative, 0.0, new)
        if not negative.any():
            break
    rl = float(c.rhs @ lam)
    return lam / rl if rl > 0 else None


def certify(problem, result, tol):
    """Set ``result``'s status, gap and violation from :func:`certificate`.

    ``"optimal"`` needs the violation beyond the rounding floor at most ``tol``
    (relative to the right-hand sides) and ``|gap| <= max(tol, GAP_ULPS eps)``.
    Otherwise: ``"max_iter"`` if the method said so, else ``"infeasible_point"``
    (violation, or a gap below ``-tol``) or ``"optimal_inaccurate"`` (a gap above
    ``tol``).  A method's claim of infeasibility (status ``"infeasible"``, its
    multipliers in ``dual``) becomes ``"infeasible"`` when they, or their
    :func:`polish_farkas` refinement, pass :func:`farkas_certificate`, and
    ``"undecided"`` otherwise; ``margin_bound`` is then the bound on the normalized
    margin, ``gap`` and ``max_violation`` are NaN.  Returns ``result``, its fields
    ``gap``, ``max_violation``, ``objective`` and ``bound`` replaced by the recomputed
    ones.
    """
    if result.status in ("infeasible", "undecided"):
        return _certify_infeasible(problem, result)
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


def farkas_program(problem):
    """Farkas multipliers of a program small enough for HiGHS, or ``None``.

    The linear program ``min sum_{k ineq} lam_k`` s.t. ``A^T lam = 0``,
    ``r^T lam = 1``, ``lam >= 0`` on the inequalities: feasible exactly when the
    max-margin program is not, and its vertex uses few rows, which
    :func:`polish_farkas` then refines to the rounding of ``A^T lam``.  ``None``
    when it is infeasible (the max-margin program has a solution), when HiGHS
    fails, or when the constraint matrix has more than :data:`POLISH_DENSE`
    entries.
    """
    c = problem.constraints
    n_var = int(np.prod(problem.shape))
    if len(c) == 0 or len(c) * n_var > POLISH_DENSE:
        return None
    A = problem.constraint_matrix().tocsc()
    A_eq = sp.vstack([A.T, sp.csr_matrix(c.rhs[None, :])]).tocsr()
    b_eq = np.zeros(n_var + 1)
    b_eq[-1] = 1.0
    bounds = np.where(c.equality[:, None], [-np.inf, np.inf], [0.0, np.inf])
    res = linprog(np.where(c.equality, 0.0, 1.0), A_eq=A_eq, b_eq=b_eq, bounds=bounds,
                  method="highs", options={"primal_feasibility_tolerance": 1e-10,
                                           "dual_feasibility_tolerance": 1e-10})
    return res.x if res.status == 0 else None


def _best_farkas(problem, candidates):
    """The candidate multipliers (or their polish) with the smallest margin bound; the
    polish (a least-squares solve) only for multipliers that do not certify as given."""
    best = (None, None)
    for dual in candidates:
        if dual is None or np.shape(dual) != (len(problem.constraints),):
            continue
        for polish in (False, True):
            lam = polish_farkas(problem, dual) if polish else dual
            if lam is None:
                continue
            cert = farkas_certificate(problem, lam)
            if best[1] is None or cert["margin"] < best[1]["margin"]:
                best = (lam, cert)
            if cert["certified"]:
                return best
    return best


def _certify_infeasible(problem, result):
    """A method's claim of infeasibility, checked: its multipliers, polished, else those
    of :func:`farkas_program`."""
    dual = None if result.dual is None else np.asarray(result.dual, dtype=float)
    dual, cert = _best_farkas(problem, [dual])
    if cert is None or not cert["certified"]:
        found, again = _best_farkas(problem, [farkas_program(problem)])
        if again is not None and (cert is None or again["margin"] < cert["margin"]):
            dual, cert = found, again
    result.status = "infeasible" if cert is not None and cert["certified"] else "undecided"
    result.dual = dual
    result.gap = result.max_violation = math.nan
    result.objective = math.nan
    result.bound = math.inf
    result.margin_bound = math.inf if cert is None else cert["margin"]
    return result
