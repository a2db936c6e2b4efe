"""Many trials at once: batched fits and a joblib-parallel sweep runner.

The papers' figures average over many random instances (100 trials in the
NTP and self-attention papers, 1000 in Fig. 9 of the max-margin paper).
Two tools make such sweeps cheap:

* **batched trials** -- independent small problems of the same shape are
  stacked along a leading *trial* axis and trained in one vectorized run of
  the shared training loop (:func:`skntp._optim.minimize` with
  ``batched=True``: each trial runs exactly as it would alone, including the
  per-trial normalization of normalized GD).  :func:`fit_ntp_trials` does
  this for :class:`~skntp.NTPDecoderClassifier` and
  :class:`~skntp.NTPAttentionClassifier` and returns one fitted estimator per
  trial, on NumPy or on a torch device; :func:`attention_trials` trains the
  query of many attention instances at once (Fig. 9).
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

from ._backend import get_backend, to_numpy
from ._optim import DESCENT_SOLVERS, minimize
from .attention import _LOSS, SATURATION_THRESHOLD, diagnose_selection
from .decoder import NTPDecoderClassifier
from .losses.attention import AttentionObjective
from .self_attention import NTPAttentionClassifier

__all__ = ["attention_trials", "fit_ntp_trials", "run_sweep", "trial_seeds"]


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


#: The parameters one batched run shares: those of the training loop.
_SHARED = ("solver", "lr", "max_iter", "tol", "eps", "power_t", "mirror_p", "descent_norm",
           "record_every", "backend", "device", "dtype", "loss", "compute_limits")


def fit_ntp_trials(estimator, datasets, *, random_state=None, max_elements=None):
    """Fit one NTP estimator per dataset in one batched run.

    The trials are stacked along a leading axis and trained together by the
    shared loop with ``batched=True``, each trial following the same iterates
    as ``clone(estimator).fit(X, y)`` alone (to rounding; the parity tests
    check 1e-10):

    * :class:`~skntp.NTPDecoderClassifier`: the batched cross-entropy (eq. (2)
      of the NTP paper), contexts padded with zero-weight rows to the largest
      ``m``;
    * :class:`~skntp.NTPAttentionClassifier`: the batched risk of
      self-attention (eq. (1) of the self-attention paper), the sequences of
      all trials as the rows of one table, padded with zero-weight copies to
      the largest ``n``.  The papers' figures average 100 such trials, which
      one run trains in about the time of a few.

    The explicit limits (``finite_component_``, ``mm_direction_``) are solved
    per trial as in ``fit``.

    Parameters
    ----------
    estimator : NTPDecoderClassifier, NTPAttentionClassifier or list of them
        The template, cloned for every trial, or one unfitted estimator per
        trial (cloned too), e.g. with its own ``embeddings``.  A descent solver
        (``"gd"``, ``"ngd"``, ``"adam"``, ``"signgd"``, ``"nsd"``,
        ``"mirror"`` or ``"nmirror"``); all must share the parameters of the
        training loop (``solver``, ``lr``, ``max_iter``, ``tol``, the
        solver's options, ``record_every``, ``backend``, ``device``,
        ``dtype``, ``loss``, ``compute_limits``).
    datasets : sequence of (X, y) or (X, y, sample_weight)
        One dataset per trial.  Decoder trials need the same number of
        features and vocabulary size (pass ``vocabulary=V`` to the template
        when the labels seen may differ); attention trials need embeddings of
        the same shape.
    random_state : int, RandomState instance, sequence of int or None
        Seeds of the trials' initializations: a sequence gives one seed per
        trial (trial ``b`` then starts where
        ``clone(estimator, random_state=seeds[b])`` starts); otherwise
        seeds are drawn with :func:`trial_seeds` (``None`` keeps each
        estimator's ``random_state``, copied by ``clone`` as for ``fit``).
    max_elements : int, optional
        Chunk budget of the decoder's batched objective (logits per chunk).

    Returns
    -------
    estimators : list of NTPDecoderClassifier or NTPAttentionClassifier
        Fitted estimators, one per trial.  ``history_`` holds each trial's
        own per-record values; ``n_iter_`` is the batch's iteration count.  A
        trial that reaches ``tol`` stays at its point while the others go on,
        and its ``history_`` goes on recording that point.

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
    datasets = list(datasets)
    if not datasets:
        raise ValueError("datasets is empty.")
    B = len(datasets)
    listed = isinstance(estimator, (list, tuple))
    estimators = [clone(est) for est in estimator] if listed else None
    template = estimators[0] if listed and estimators else estimator
    models = (NTPDecoderClassifier, NTPAttentionClassifier)
    if listed and len(estimators) != B:
        raise ValueError(f"{len(estimators)} estimators for {B} datasets.")
    if not isinstance(template, models) or listed and any(
            type(est) is not type(template) for est in estimators):
        raise TypeError("fit_ntp_trials takes an NTPDecoderClassifier or "
                        "NTPAttentionClassifier template, or a list of estimators of one "
                        "of these classes.")
    if template.solver not in DESCENT_SOLVERS:
        raise ValueError(
            f"batched trials run the descent solvers {DESCENT_SOLVERS}; got "
            f"solver={template.solver!r} (fit those trials one by one)."
        )
    if any(getattr(est, "record_weights", False) for est in (estimators or [template])):
        raise ValueError("record_weights=True keeps one trajectory per fit, which a "
                         "batched run does not record; fit those trials one by one.")
    if listed:
        shared = {k: v for k, v in template.get_params().items() if k in _SHARED}
        for b, est in enumerate(estimators):
            differ = sorted(k for k, v in shared.items() if est.get_params()[k] != v)
            if differ:
                raise ValueError(
                    f"the estimators of one batched run share the parameters of its "
                    f"training loop; estimator {b} differs from estimator 0 in {differ}.")
    if random_state is None:  # each clone keeps its own (copied) random_state
        seeds = [None] * B
    elif np.ndim(random_state) == 1:
        seeds = list(random_state)
        if len(seeds) != B:
            raise ValueError(f"random_state has {len(seeds)} seeds for {B} datasets.")
    else:
        seeds = [int(s) for s in trial_seeds(random_state, B)]
    for data in datasets:
        if len(data) not in (2, 3):
            raise ValueError("each dataset must be (X, y) or (X, y, sample_weight).")
    estimators = [est if listed else clone(estimator) for est in estimators or [None] * B]
    if random_state is not None:
        for est, seed in zip(estimators, seeds):
            est.set_params(random_state=seed)
    options = {}
    if isinstance(template, NTPDecoderClassifier):
        options["max_elements"] = max_elements
    elif max_elements is not None:
        raise ValueError("max_elements chunks the decoder's objective; the attention "
                         "trials' risk has no chunks.")
    return type(template)._fit_trials(
        estimators, [tuple(data) + (None,) * (3 - len(data)) for data in datasets],
        **options)


def attention_trials(X, y, head, *, loss="log_loss", solver="ngd", lr=1.0, max_iter=1000,
                     reduce=True, method="auto", threshold=None, backend="numpy",
                     device=None, dtype="float64"):
    """Train ``p`` on many independent instances at once and classify the outcomes.

    The Fig. 9 experiment (App. E): every trial ``b`` has its own tokens,
    labels and head, ``W = I`` and ``p(0) = 0``.  All trials run in one
    vectorized call of the shared training loop
    (:func:`~skntp._optim.minimize` with ``batched=True``: per-trial
    normalization for ``"ngd"``), then every trial is classified by
    :func:`diagnose_selection`.

    With ``reduce=True`` and ``d > n T`` the tokens are first written in an
    orthonormal basis ``Q`` of their span (``X -> X Q``, ``v -> Q^T v``, from
    the eigendecomposition of the ``nT x nT`` Gram matrix).  This
    is exact: from ``p(0) = 0`` every gradient, hence every iterate, lies in
    that span, ``p = Q z`` has ``||p|| = ||z||``, logits and gradients are
    preserved, and every ``p^mm(alpha)`` lies in the span too.  The cost then
    no longer grows with ``d``.

    Parameters
    ----------
    X : ndarray of shape (B, n, T, d)
    y : ndarray of shape (B, n)
        Labels in ``{-1, +1}``.
    head : ndarray of shape (B, d)
    loss, solver, lr, max_iter :
        As in :class:`AttentionSelector` (the paper: NGD, ``lr = 1``, 1000
        iterations).
    reduce : bool, default=True
    method : str, default="auto"
        Max-margin method for (ATT-SVM).
    threshold : float, default=None
        Saturation threshold of App. E (``None``:
        :data:`skntp.attention.SATURATION_THRESHOLD`, ``1 - 1e-5``).
    backend, device, dtype :
        Array layer of the training loop.

    Returns
    -------
    dict of ndarray, each of shape (B,)
        ``convergence`` (str), ``saturation``, ``correlation`` (cosine of
        ``p`` with ``p^mm(alpha)``, nan when infeasible), ``min_score_gap``,
        ``locally_optimal``, ``selects_optimal``, ``norm`` (``||p||``).
    """
    if loss not in _LOSS:
        raise ValueError(f"loss must be one of {sorted(_LOSS)}, got {loss!r}.")
    threshold = SATURATION_THRESHOLD if threshold is None else threshold
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    head = np.asarray(head, dtype=float)
    B, n, T, d = X.shape
    if reduce and d > n * T:
        # Coordinates in an orthonormal basis of the span from the Gram matrix:
        # X_flat = U S V^T gives X_flat V = U S and V^T v = S^{-1} U^T X_flat v.
        flat = X.reshape(B, n * T, d)
        lam, U = np.linalg.eigh(flat @ np.swapaxes(flat, 1, 2))           # (B, nT)
        keep = lam > lam[:, -1:] * (n * T) * np.finfo(float).eps
        S = np.sqrt(np.where(keep, lam, 1.0))
        coords = np.where(keep[:, None, :], U * S[:, None, :], 0.0)        # (B, nT, nT)
        hv = (flat @ head[..., None])[..., 0]                               # (B, nT)
        head = np.where(keep, (np.swapaxes(U, 1, 2) @ hv[..., None])[..., 0] / S, 0.0)
        X = coords.reshape(B, n, T, n * T)
    k = X.shape[-1]
    be = get_backend(backend, device, dtype)
    obj = AttentionObjective(be.xp, be.asarray(X), be.asarray(y), v=be.asarray(head),
                             loss=_LOSS[loss], train=("p",))
    res = minimize(obj, (be.zeros((B, k)),), xp=be.xp, solver=solver, lr=lr,
                   max_iter=max_iter, record_every=max_iter, batched=True)
    P = np.asarray(to_numpy(res.params[0]), dtype=float)
    scores = y[..., None] * (X @ head[:, None, :, None])[..., 0]
    out = {key: [] for key in ("convergence", "saturation", "correlation", "min_score_gap",
                               "locally_optimal", "selects_optimal", "norm")}
    for b in range(B):
        rep = diagnose_selection(X[b], scores[b], P[b], method=method, threshold=threshold)
        for key in out:
            out[key].append(np.linalg.norm(P[b]) if key == "norm" else rep[key])
    return {key: np.asarray(val) for key, val in out.items()}
