"""The norms of the max-margin programs and their duals.

The optimizer decides the norm of the limit (normalized GD: Frobenius, sign
descent: entrywise max, spectral descent: spectral, factored ``K Q^T``:
nuclear, lp mirror descent: lp); a norm is a new objective over the same
constraints, not a new program.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["MATRIX_NORMS", "NORMS", "check_norm", "dual_norm", "norm_gap", "norm_kind",
           "norm_label", "norm_value"]

#: the Frobenius (Euclidean) norm, the nuclear and spectral norms of a matrix
#: parameter, and the entrywise max (l-infinity) and l1 norms; besides these,
#: the entrywise lp norms ``("lp", p)``, ``1 < p < inf`` (kind ``"lp"``)
NORMS = ("fro", "nuclear", "spectral", "max", "l1")
#: the norms of a matrix parameter only
MATRIX_NORMS = ("nuclear", "spectral")
#: the dual norm of each named norm (the dual's constraint ``||S^*(C(lam))||_* <= 1``)
_DUAL_NORM = {"fro": "fro", "nuclear": "spectral", "spectral": "nuclear", "max": "l1",
              "l1": "max"}


def check_norm(norm):
    """Validate a norm and return its canonical form.

    Parameters
    ----------
    norm : str or tuple
        One of :data:`NORMS` (``"fro"``, ``"nuclear"``, ``"spectral"``,
        ``"max"``, ``"l1"``), or ``("lp", p)`` (a tuple or a list) for the
        entrywise lp norm with a finite real ``p > 1``.

    Returns
    -------
    str or tuple
        The name, or ``("lp", float(p))``.  ``("lp", 2)`` stays an lp norm
        (its programs have the Frobenius solution).

    Raises
    ------
    ValueError
        For anything else, with the accepted values; ``("lp", 1)`` and
        ``("lp", inf)`` point to ``"l1"`` and ``"max"``.
    """
    if isinstance(norm, str):
        if norm in NORMS:
            return norm
        raise ValueError(f"norm must be one of {list(NORMS)} or ('lp', p) with 1 < p < inf, "
                         f"got {norm!r}.")
    if isinstance(norm, (tuple, list)) and len(norm) == 2 and norm[0] == "lp":
        p = norm[1]
        if isinstance(p, (bool, np.bool_)) or not isinstance(
                p, (int, float, np.integer, np.floating)):
            raise ValueError(f"the p of norm=('lp', p) must be a real number, got {p!r}.")
        p = float(p)
        if p == 1.0:
            raise ValueError("norm=('lp', 1) is the l1 norm: use norm='l1' (a linear "
                             "program).")
        if p == math.inf:
            raise ValueError("norm=('lp', inf) is the entrywise max norm: use norm='max' "
                             "(a linear program).")
        if not (math.isfinite(p) and p > 1.0):
            raise ValueError(f"the p of norm=('lp', p) must be a finite number > 1, got "
                             f"{norm[1]!r}.")
        return ("lp", p)
    raise ValueError(f"norm must be one of {list(NORMS)} or ('lp', p) with 1 < p < inf, "
                     f"got {norm!r}.")


def norm_kind(norm):
    """``"lp"`` for ``("lp", p)``, the name for the named norms (the registry's key)."""
    return "lp" if isinstance(norm, tuple) else norm


def norm_label(norm):
    """A short name of a canonical norm for messages (``("lp", 1.5)``: ``"l1.5"``)."""
    return f"l{norm[1]:g}" if isinstance(norm, tuple) else norm


def dual_norm(norm):
    """The dual norm: ``fro``, ``nuclear <-> spectral``, ``max <-> l1``, ``lp <-> lq``
    with ``1/p + 1/q = 1``."""
    norm = check_norm(norm)
    if isinstance(norm, tuple):
        p = norm[1]
        return ("lp", p / (p - 1.0))
    return _DUAL_NORM[norm]



def norm_value(W, norm):
    """``||W||`` in a norm of :func:`check_norm` (``"fro"``: the Frobenius norm;
    ``("lp", p)``: entrywise, of the flattened ``W``)."""
    W = np.asarray(W, dtype=float)
    norm = check_norm(norm)
    if isinstance(norm, tuple):
        a = np.abs(W).ravel()
        top = float(a.max(initial=0.0))
        if top == 0.0:
            return 0.0
        # scaled by the largest entry: |w_i|^p neither overflows nor underflows
        return top * float(np.sum((a / top) ** norm[1])) ** (1.0 / norm[1])
    if norm == "nuclear":
        return float(np.linalg.svd(W, compute_uv=False).sum())
    if norm == "spectral":
        return float(np.linalg.norm(W, 2)) if W.size else 0.0
    if norm == "max":
        return float(np.abs(W).max(initial=0.0))
    if norm == "l1":
        return float(np.abs(W).sum())
    top = float(np.abs(W).max(initial=0.0))
    if top == 0.0 or not np.isfinite(top):
        return top
    # scaled by the largest entry: squares of entries below 1e-154 would underflow to 0
    return top * float(np.linalg.norm(W / top))


def norm_gap(problem, W, dual, A=None):
    """Relative duality gap of ``min ||W||`` (a norm other than Frobenius) at a primal
    ``W`` and multipliers ``dual``.

    The multipliers are clipped to the sign constraints and scaled into the
    dual's feasible set ``||S^*(C(lam))||_* <= 1`` (the dual norm,
    :func:`dual_norm`: spectral for the nuclear norm and nuclear for the
    spectral norm, l1 for max, max for l1, lq for lp); the dual value
    ``r^T lam / ||S^*(C(lam))||_*`` is then a lower bound on the optimum and
    ``(||W|| - r^T lam / ||.||_*) / ||W||`` the gap (with the violation of
    ``W``, the certificate).

    Returns
    -------
    gap : float
    dual : ndarray
        The scaled (dual-feasible) multipliers.
    """
    c = problem.constraints
    A = problem.constraint_matrix() if A is None else A
    lam = np.where(c.equality, dual, np.maximum(dual, 0.0))
    M = np.asarray(A.T @ lam).reshape(problem.shape)
    dual_size = norm_value(M, dual_norm(problem.norm))
    size = norm_value(W, problem.norm)
    if dual_size == 0.0 or size == 0.0:
        return (0.0 if size == 0.0 else 1.0), lam
    lam = lam / dual_size
    return float((size - c.rhs @ lam) / size), lam

