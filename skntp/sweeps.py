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
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_random_state

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
    for data in datasets:
        if len(data) not in (2, 3):
            raise ValueError("each dataset must be (X, y) or (X, y, sample_weight).")
    estimators = [clone(estimator).set_params(random_state=seed) for seed in seeds]
    return NTPDecoderClassifier._fit_trials(
        estimators, [tuple(data) + (None,) * (3 - len(data)) for data in datasets],
        max_elements=max_elements)
