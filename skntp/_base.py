"""Pieces shared by the estimator classes (parameters, backend, init)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from ._backend import get_backend

__all__ = ["BACKEND_CONSTRAINTS", "TRAINING_CONSTRAINTS", "backend_of"]

BACKEND_CONSTRAINTS = {
    "backend": [StrOptions({"numpy", "torch"})],
    "device": [str, None],
    "dtype": [StrOptions({"float64", "float32"})],
    "svm_method": [str],
    "random_state": ["random_state"],
    "verbose": ["verbose"],
}

TRAINING_CONSTRAINTS = {
    "lr": [Interval(Real, 0, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "tol": [Interval(Real, 0, None, closed="left")],
    "record_every": [Interval(Integral, 1, None, closed="left")],
    "path_radii": ["array-like", None],
}


def backend_of(estimator):
    """The :class:`~skntp._backend.Backend` an estimator's parameters ask for."""
    return get_backend(estimator.backend, estimator.device, estimator.dtype)


def backend_kwargs(estimator):
    """``backend``, ``device``, ``dtype`` keywords for the max-margin core."""
    return {"backend": estimator.backend, "device": estimator.device,
            "dtype": estimator.dtype}


def default_radii(path_radii, start=0.5, stop=200.0, num=24):
    """The regularization path's grid: the user's radii or a geometric grid."""
    if path_radii is None:
        return np.geomspace(start, stop, num)
    radii = np.asarray(path_radii, dtype=float)
    if radii.ndim == 0:
        radii = radii[None]
    if radii.size == 0 or not np.all(np.isfinite(radii)) or np.any(radii <= 0):
        raise ValueError("path_radii must be a non-empty array of positive numbers.")
    if radii.ndim == 1 and np.any(np.diff(radii) < 0):
        raise ValueError("path_radii must be increasing.")
    return radii


def limit_progress(estimator, program):
    """Progress callback of an estimator's limit solve (``None`` unless ``verbose > 0``).

    Pass it as ``callback=`` to the :mod:`skntp.svm` solve and close it with
    :func:`skntp._progress.close_progress` afterwards; it shows
    ``"limit <program>: it=..., gap=..., viol=..."``.
    """
    from ._progress import make_limit_progress

    return make_limit_progress(estimator.verbose, desc=f"limit {program}")


def train(estimator, objective, params0, be, metrics):
    """Run the shared training loop with an estimator's solver parameters.

    ``estimator`` supplies ``solver``, ``lr``, ``max_iter``, ``tol``,
    ``record_every``, ``path_radii`` and ``verbose``; the regularization path
    solves ``max_iter`` inner iterations per radius.

    Returns
    -------
    OptimResult
    """
    from ._optim import minimize
    from ._progress import make_progress

    radii = default_radii(estimator.path_radii) if estimator.solver == "regpath" else None
    return minimize(
        objective,
        tuple(be.asarray(p) for p in params0),
        xp=be.xp,
        solver=estimator.solver,
        lr=estimator.lr,
        max_iter=estimator.max_iter,
        tol=estimator.tol,
        metrics=metrics,
        record_every=estimator.record_every,
        radii=radii,
        inner_max_iter=estimator.max_iter,
        # the regularization path reports no per-iteration progress
        progress=(None if estimator.solver == "regpath" else
                  make_progress(estimator.verbose, estimator.max_iter, desc=estimator.solver)),
    )
