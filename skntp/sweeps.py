"""Many trials at once: batched fits and a joblib-parallel sweep runner.

The papers' figures average over many random instances (100 trials in the
NTP and self-attention papers, 1000 in Fig. 9 of the max-margin paper).
Two tools make such sweeps cheap:

* **batched trials** -- independent small problems of the same shape are
  stacked along a leading *trial* axis and trained in one vectorized run of
  the shared training loop (:func:`skntp._optim.minimize` with
  ``batched=True``: each trial runs exactly as it would alone, including the
  per-trial normalization of normalized GD).  :func:`fit_ntp_trials` does
  this for :class:`~skntp.NTPDecoderClassifier` and returns one fitted
  estimator per trial, on NumPy or on a torch device.
* **parallel sweeps** -- :func:`run_sweep` maps a function over a parameter
  grid with :class:`joblib.Parallel`.  It never names a joblib backend, so
  ``with joblib.parallel_config(backend="dask"):`` (or ``"ray"`` after
  ``ray.util.joblib.register_ray()``) runs the same sweep on a cluster
  without code changes.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_random_state

from ._backend import to_numpy
from ._optim import minimize

__all__ = ["fit_ntp_trials", "run_sweep", "trial_seeds"]


def trial_seeds(random_state, n_trials):
    """``n_trials`` independent integer seeds drawn from ``random_state``.

    Parameters
    ----------
    random_state : int, RandomState instance or None
    n_trials : int

    Returns
    -------
    ndarray of shape (n_trials,)
    """
    rng = check_random_state(random_state)
    return rng.randint(np.iinfo(np.int32).max, size=int(n_trials))


def run_sweep(func, grid, *, n_jobs=None, verbose=0, **fixed):
    """Evaluate ``func(**params, **fixed)`` for every point of ``grid`` in parallel.

    Parameters
    ----------
    func : callable
        Must be picklable (a module-level function) for process-based
        joblib backends.
    grid : dict of lists, list of dicts or :class:`~sklearn.model_selection.ParameterGrid`
        The sweep: a dict of lists is expanded to its Cartesian product,
        as by :class:`~sklearn.model_selection.ParameterGrid`.
    n_jobs : int, default=None
        Workers of :class:`joblib.Parallel` (``None``: the active joblib
        configuration, 1 by default; ``-1``: all cores).  The joblib backend
        is the active one, so ``joblib.parallel_config(backend="dask")``
        distributes the sweep over a Dask cluster unchanged.
    verbose : int, default=0
    **fixed :
        Keyword arguments passed to every call.

    Returns
    -------
    list of (dict, object)
        ``(params, func(**params, **fixed))`` in grid order.

    Examples
    --------
    >>> from skntp.sweeps import run_sweep
    >>> def area(width, height):
    ...     return width * height
    >>> [r for _, r in run_sweep(area, {"width": [1, 2], "height": [3]})]
    [3, 6]
    """
    points = list(ParameterGrid(grid)) if isinstance(grid, (dict, ParameterGrid)) \
        else [dict(p) for p in grid]
    results = Parallel(n_jobs=n_jobs, verbose=verbose)(
        delayed(func)(**p, **fixed) for p in points
    )
    return list(zip(points, results))


def _stack_probs(probs, m_max):
    """Stack per-trial (m_b, V) sparse rows, each padded to ``m_max`` rows."""
    V = probs[0].shape[1]
    return sp.vstack([
        sp.vstack([P, sp.csr_matrix((m_max - P.shape[0], V))]) if P.shape[0] < m_max else P
        for P in probs
    ]).tocsr()


def _batched_metrics(be, estimators):
    """Per-trial ``norm``, ``alignment``, ``alignment_corrected``, ``finite_distance``.

    The batched counterpart of :func:`skntp.metrics.history_metrics`: every
    value is a vector over trials (NaN where a trial has no max-margin
    direction).
    """
    xp = be.xp
    shape = estimators[0].coef_shape_
    has_dir = np.array([e.mm_direction_ is not None for e in estimators])
    has_fin = all(e.finite_component_ is not None for e in estimators)
    zeros = np.zeros(shape)
    D = be.asarray(np.stack([e.mm_direction_ if e.mm_direction_ is not None else zeros
                             for e in estimators])) if has_dir.any() else None
    F = be.asarray(np.stack([e.finite_component_ for e in estimators])) if has_fin else None
    projs = [e._projector for e in estimators] if has_fin else None
    basis = None
    if projs is not None and all(p.is_zero or p.basis is not None for p in projs):
        r = max([0] + [p.basis.shape[1] for p in projs if not p.is_zero])
        stacked = np.zeros((len(projs), int(np.prod(shape)), r))
        for b, p in enumerate(projs):
            if not p.is_zero:
                stacked[b, :, : p.basis.shape[1]] = p.basis
        basis = be.asarray(stacked)
    nan_where = np.where(has_dir, 0.0, np.nan)

    def trial_norm(a):
        return xp.sqrt(xp.sum(xp.reshape(a * a, (a.shape[0], -1)), axis=1))

    def trial_dot(a, b):
        return xp.sum(xp.reshape(a * b, (a.shape[0], -1)), axis=1)

    def ratio(num, den):
        num, den = to_numpy(num), to_numpy(den)
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0) + nan_where

    def metrics(params):
        W = params[0]
        nw = trial_norm(W)
        out = {"norm": to_numpy(nw)}
        if D is not None:
            out["alignment"] = ratio(trial_dot(W, D), nw)
            if F is not None:
                R = W - F
                out["alignment_corrected"] = ratio(trial_dot(R, D), trial_norm(R))
        if F is not None:
            if basis is not None:
                flat = xp.reshape(W, (W.shape[0], -1, 1))
                P = basis @ (xp.matrix_transpose(basis) @ flat)
                out["finite_distance"] = to_numpy(
                    trial_norm(xp.reshape(P, W.shape) - F))
            else:
                Wn = to_numpy(W)
                out["finite_distance"] = np.array([
                    float(np.linalg.norm(p.project(Wn[b]) - e.finite_component_))
                    for b, (p, e) in enumerate(zip(projs, estimators))
                ])
        return out

    return metrics


def fit_ntp_trials(estimator, datasets, *, random_state=None, max_elements=None):
    """Fit one :class:`~skntp.NTPDecoderClassifier` per dataset in one batched run.

    The trials are stacked along a leading axis (contexts padded with
    zero-weight rows to the largest ``m``) and trained together by the
    shared loop with ``batched=True``: the batched cross-entropy (eq. (2))
    evaluates all trials with batched matrix products, and each trial
    follows the same iterates as ``clone(estimator).fit(X, y)`` alone (to
    rounding; the parity tests check 1e-10).  The explicit limits
    (``finite_component_``, ``mm_direction_``) are solved per trial as in
    ``fit``.

    Parameters
    ----------
    estimator : NTPDecoderClassifier
        The template (solver ``"gd"``, ``"ngd"`` or ``"adam"``; its backend,
        device and dtype are used for the batched run).
    datasets : sequence of (X, y) or (X, y, sample_weight)
        One dataset per trial; all must have the same number of features
        and the same vocabulary size (pass ``vocabulary=V`` to the template
        when the labels seen may differ).
    random_state : int, RandomState instance, sequence of int or None
        Seeds of the trials' initializations: a sequence gives one seed per
        trial (trial ``b`` then starts where
        ``clone(estimator, random_state=seeds[b])`` starts); otherwise
        seeds are drawn with :func:`trial_seeds` (``None`` keeps the
        template's ``random_state`` for every trial).
    max_elements : int, optional
        Chunk budget of the batched objective (logits per chunk).

    Returns
    -------
    estimators : list of NTPDecoderClassifier
        Fitted estimators, one per trial.  ``history_`` holds each trial's
        own per-record values; ``n_iter_`` is the batch's iteration count.

    Examples
    --------
    >>> from skntp import NTPDecoderClassifier
    >>> from skntp.datasets import make_ntp_data
    >>> from skntp.sweeps import fit_ntp_trials
    >>> data = [make_ntp_data(200, 5, 8, 4, 2, random_state=s) for s in range(10)]
    >>> fits = fit_ntp_trials(NTPDecoderClassifier(max_iter=50, vocabulary=4), data,
    ...                       random_state=0)
    >>> len(fits), fits[0].coef_.shape
    (10, (4, 8))
    """
    from .decoder import NTPDecoderClassifier
    from .models.decoder import CrossEntropy

    if not isinstance(estimator, NTPDecoderClassifier):
        raise TypeError("fit_ntp_trials takes an NTPDecoderClassifier template.")
    if estimator.solver not in ("gd", "ngd", "adam"):
        raise ValueError(
            f"batched trials run the gradient solvers 'gd', 'ngd' and 'adam'; got "
            f"solver={estimator.solver!r} (fit those trials one by one)."
        )
    datasets = list(datasets)
    if not datasets:
        raise ValueError("datasets is empty.")
    B = len(datasets)
    if random_state is None:
        seeds = [estimator.random_state] * B
    elif np.ndim(random_state) == 1:
        seeds = list(random_state)
        if len(seeds) != B:
            raise ValueError(f"random_state has {len(seeds)} seeds for {B} datasets.")
    else:
        seeds = [int(s) for s in trial_seeds(random_state, B)]
    ests, prepared = [], []
    for data, seed in zip(datasets, seeds):
        if len(data) not in (2, 3):
            raise ValueError("each dataset must be (X, y) or (X, y, sample_weight).")
        est = clone(estimator).set_params(random_state=seed)
        prepared.append(est._prepare(*data[:2], data[2] if len(data) == 3 else None))
        ests.append(est)
    be = prepared[0][0]
    shapes = {(P.shape[1], H.shape[1]) for _, H, _, P in prepared}
    if len(shapes) != 1:
        raise ValueError(
            "all trials need the same vocabulary size and number of features; got "
            f"(V, d) in {sorted(shapes)}. Pass vocabulary=V to the template."
        )
    (V, d), = shapes
    m_max = max(H.shape[0] for _, H, _, _ in prepared)
    contexts = np.zeros((B, m_max, d))
    weights = np.zeros((B, m_max))
    for b, (_, H, pi, _) in enumerate(prepared):
        contexts[b, : H.shape[0]] = H
        weights[b, : H.shape[0]] = pi
    probs = _stack_probs([P for *_, P in prepared], m_max)
    for e in ests:
        e.coef_shape_ = (V, d)
    metrics = _batched_metrics(be, ests)
    W0 = np.stack([e._init_coef(V, d) for e in ests])
    objective = CrossEntropy(be, contexts, weights, probs, max_elements=max_elements)
    result = minimize(
        objective, (be.asarray(W0),), xp=be.xp, solver=estimator.solver, lr=estimator.lr,
        max_iter=estimator.max_iter, tol=estimator.tol, metrics=metrics,
        record_every=estimator.record_every, batched=True,
    )
    W = np.asarray(to_numpy(result.params[0]), dtype=np.float64)
    hist = result.history
    for b, e in enumerate(ests):
        del e.coef_shape_
        e.coef_ = W[b]
        e.n_iter_ = result.n_iter
        e.history_ = {k: (v[:, b] if v.ndim == 2 else v.copy()) for k, v in hist.items()}
        e.history_["excess_loss"] = e.history_["loss"] - e.entropy_
        e._set_alignment()
    return ests
