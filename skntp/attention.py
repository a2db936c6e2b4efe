"""Attention as token selection (Tarzanagh et al., "Max-Margin Token Selection
in Attention Mechanism", Sec. 2): :class:`AttentionSelector`.

The model is ``f(X) = v^T X^T softmax(X W^T p)`` (eq. (5)) with a fixed head
``v``, trained in the query ``p`` (or, equivalently by Lemma 1, in the
key-query matrix ``W``) on ``l(Y f(X))`` (ERM).  Gradient descent drives
``||p|| -> infinity`` and the softmax to select one token per input; the
direction converges to a max-margin separator of the selected tokens,
``p^mm(alpha)`` of (ATT-SVM): the globally optimal one ``p^mm*`` (GMM) along
the regularization path (Thm. 1) and for GD with one input (Thm. 2), a
locally optimal one (LMM, Def. 2) for GD started in its cone (Thm. 3).
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    check_random_state,
    column_or_1d,
    validate_data,
)

from ._backend import to_numpy
from ._base import (
    BACKEND_CONSTRAINTS,
    TRAINING_CONSTRAINTS,
    backend_of,
    default_radii,
    limit_progress,
)
from ._optim import minimize
from ._progress import close_progress, make_progress
from ._sequences import check_sequences
from .metrics import alignment
from .models.attention import (
    LOSSES,
    AttentionObjective,
    attention_features,
    attention_loss_grad,
    attention_weights,
)
from .svm import NotSeparableError, att_svm, att_svm_prime, min_score_gap, svm_neighbors

__all__ = ["SATURATION_THRESHOLD", "AttentionSelector", "JointAttentionSVM", "attention_trials",
           "diagnose_selection"]

#: Softmax saturation threshold of App. E (Fig. 9): mean selected probability.
SATURATION_THRESHOLD = 1.0 - 1e-5
_SVM_NATS = 20.0


def diagnose_selection(keys, scores, query, *, mask=None, optimal=None, method="auto",
                       threshold=SATURATION_THRESHOLD):
    """Classify what attention with query ``p`` selects (App. E, Fig. 9).

    Parameters
    ----------
    keys : ndarray of shape (n, T, k)
    scores : ndarray of shape (n, T)
        Token scores ``gamma_it`` (Def. 1).
    query : ndarray of shape (k,)
        The (trained) attention weights ``p``.
    mask : ndarray of bool, shape (n, T), or None
    optimal : ndarray of bool, shape (n, T), or None
        Optimal tokens (default: the argmax scores, ties included).
    method : str, default="auto"
        Method of the max-margin core for (ATT-SVM).
    threshold : float, default=1 - 1e-5
        Saturation threshold of App. E.

    Returns
    -------
    dict
        ``selected`` (``alpha_i = argmax_t S(K_i p)_t``), ``saturation``
        (``mean_i S(K_i p)_{alpha_i}``), ``saturated``, ``mm`` (``p^mm(alpha)``
        of (ATT-SVM) with margin 1, or ``None`` if infeasible),
        ``neighbors`` (Def. 2, bool (n, T) or ``None``), ``min_score_gap``
        (``min_{i, t in T_i} gamma_{i alpha_i} - gamma_it``, Fig. 9(b)),
        ``locally_optimal`` (Def. 2), ``selects_optimal`` (every
        ``alpha_i`` is an optimal token), ``correlation`` (cosine of ``p``
        with ``p^mm(alpha)``) and ``convergence``: ``"not-saturated"``,
        ``"global"`` (saturated on the optimal tokens, a GMM), ``"local"``
        (saturated on locally optimal tokens, an LMM) or ``"other"``.
    """
    keys = np.asarray(keys, dtype=float)
    scores = np.asarray(scores, dtype=float)
    n, T, _ = keys.shape
    mask = np.ones((n, T), bool) if mask is None else np.asarray(mask, bool)
    query = np.asarray(query, dtype=float)
    s = attention_weights(np, keys, query, mask)
    selected = np.argmax(s, axis=1)
    saturation = float(s[np.arange(n), selected].mean())
    if optimal is None:
        sc = np.where(mask, scores, -np.inf)
        top = sc.max(axis=1, keepdims=True)
        optimal = mask & (sc >= top - 1e-12 * (1 + np.abs(top)))
    out = {"selected": selected, "saturation": saturation,
           "saturated": saturation >= threshold, "mm": None, "neighbors": None,
           "min_score_gap": float("nan"), "locally_optimal": False,
           "selects_optimal": bool(optimal[np.arange(n), selected].all()),
           "correlation": float("nan")}
    try:
        mm = att_svm(keys, selected, mask=mask, method=method)
    except NotSeparableError:
        mm = None
    if mm is not None:
        nb = svm_neighbors(keys, selected, mm, mask=mask)
        gap = min_score_gap(scores, selected, nb)
        out.update(mm=mm, neighbors=nb, min_score_gap=gap, locally_optimal=gap > 0,
                   correlation=alignment(query, mm))
    if not out["saturated"]:
        out["convergence"] = "not-saturated"
    elif mm is None:
        out["convergence"] = "other"
    elif out["selects_optimal"] and (out["locally_optimal"] or optimal.sum(1).max() > 1):
        out["convergence"] = "global"
    elif out["locally_optimal"]:
        out["convergence"] = "local"
    else:
        out["convergence"] = "other"
    return out


class AttentionSelector(ClassifierMixin, TransformerMixin, BaseEstimator):
    """Softmax attention that selects one token per input, ``f(X) = v^T X^T S(X W^T p)``.

    The head ``v`` is fixed; the query ``p`` (``train="p"``) or the key-query
    matrix ``W`` (``train="W"``) is trained on the risk (ERM)
    ``mean_i l(Y_i f(X_i))`` of Tarzanagh et al. (2023), or set to its
    max-margin limit (``solver="svm"``).  After fitting, the estimator reports
    which token the attention selects in every input, the max-margin
    direction of that selection (ATT-SVM), its SVM-neighbors and whether it
    is locally optimal (Def. 2), and whether the fit converged to the
    globally optimal direction (GMM), a locally optimal one (LMM) or neither
    (the outcomes of the paper's Fig. 9).

    Parameters
    ----------
    head : array-like of shape (d,), default=None
        The fixed head ``v``.  ``None`` uses the normalized difference of the
        class means of the mean-pooled tokens,
        ``unit(mean_{Y=+1} mean_t x_t - mean_{Y=-1} mean_t x_t)`` (the first
        step of a linear classifier on mean-pooled inputs), or ``e_1`` if
        that difference is zero.
    key_query : array-like of shape (k, d), default=None
        ``W`` (keys ``K = X W^T``); ``None`` is the identity.  With
        ``train="W"`` it is the initial ``W(0)``.
    train : {"p", "W"}, default="p"
        ``"p"``: train the query ``p`` (Sec. 2).  ``"W"``: train ``W`` with
        the query fixed to ``u = query_init``; the step on ``W`` is scaled as
        in Lemma 1 (``lr/||u||^2`` for ``"gd"``, ``lr/||u||`` for ``"ngd"``,
        radii ``/||u||`` for ``"regpath"``) so that ``W(t)^T u`` follows
        exactly the iterates of ``train="p"`` with ``key_query=None`` started
        at ``W(0)^T u``.  Directions are then computed for the effective query
        ``W^T u`` on the keys ``X`` (``W = I``).
    loss : {"logistic", "exponential", "correlation"}, default="logistic"
        ``l(u) = log(1 + e^{-u})``, ``e^{-u}`` or ``-u`` (Assumption A).
    solver : {"gd", "ngd", "regpath", "svm"}, default="ngd"
        ``"gd"``: gradient descent (3); ``"ngd"``: normalized GD (App. E);
        ``"regpath"``: the regularization path (2), ``argmin_{||p|| <= R}``
        over ``path_radii`` (Thm. 1), each radius solved by the shared loop
        from two starts (the previous solution and ``R`` times the GMM
        direction) keeping the lower risk, since (2) is non-convex; ``"svm"``: the explicit limit
        ``p = svm_radius * gmm_direction_`` (Thm. 1/2).
    query_init : None, "zeros", "random" or array-like of shape (k,), default=None
        ``train="p"``: the start ``p(0)`` (``None``/"zeros": ``0``;
        "random": ``N(0, I/k)`` from ``random_state``; an array, e.g. a point
        of the cone around an LMM direction, Thm. 3).  ``train="W"``: the fixed
        query ``u`` (``None``: ``1/sqrt(k)`` in every entry; "random": a
        ``N(0, I/k)`` draw).
    lr : float, default=0.1
        Step size (the paper's normalized GD uses 0.1 in Fig. 1-4 and 1 in
        Fig. 9).
    max_iter : int, default=1000
        Iterations (inner iterations per radius for ``"regpath"``).
    tol : float, default=0.0
        Stop when the gradient norm falls to ``tol``.  On separable
        selections ``||p||`` diverges by design, so ``max_iter`` is the horizon.
    svm_radius : "auto" or float, default="auto"
        ``R`` of ``solver="svm"``.  "auto" takes ``R = (20 + log T)
        ||p^mm*||``: the max-margin constraints (logit gaps ``>= 1`` at
        ``p^mm*``) then put every non-optimal logit at least ``20 + log T``
        below the optimal one, so the attention on the optimal tokens is at
        least ``1 - e^{-20}`` in every input.
    path_radii : array-like, default=None
        Increasing radii of the regularization path.  ``None``: 16 radii from
        0.1 to 30 times ``||p^mm*||`` (the margin-1 GMM solution), i.e. up to
        logit gaps of about 30; beyond that the risk differs from its
        infimum by less than float64 resolves (``e^{-36}``), so larger radii
        cannot be solved meaningfully.  Without a GMM direction:
        ``geomspace(0.5, 200, 24)``.
    max_optimal_choices : int, default=4096
        With tied optimal tokens, (ATT-SVM') of App. D is solved by
        enumerating up to this many choices of one optimal token per input.
    classes : array-like of 2 labels, default=None
        The two labels (sorted; the first is ``Y = -1``).  ``None`` takes
        them from ``y``, which must then hold both; naming them lets ``y``
        hold one label only (e.g. a single input, Thm. 2).
    svm_method : str, default="auto"
        Method of the max-margin core.
    record_every : int, default=10
        Record the history every that many iterations (and always the first
        and the last).  Each record evaluates the metrics of ``history_``
        (alignment, projection onto the finite subspace, ...), which cost
        about one gradient step or more; every 10 iterations keeps that
        overhead under 20 % of the descent (``benchmarks/record_every.py``).
        Use 1 to record every iteration.
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds ``query_init="random"``.
    verbose : int, default=0

    Attributes
    ----------
    query_ : ndarray of shape (k,)
        ``p`` (trained with ``train="p"``; the fixed ``u`` with ``train="W"``).
    head_ : ndarray of shape (d,)
        ``v``.
    key_query_ : ndarray of shape (k, d)
        ``W`` (trained with ``train="W"``).
    classes_ : ndarray of shape (2,)
        ``classes_[0]`` is mapped to ``Y = -1``, ``classes_[1]`` to ``+1``.
    token_scores_ : ndarray of shape (n, T)
        ``gamma_it = Y_i v^T x_it`` (Def. 1); ``-inf`` at padding.
    optimal_tokens_ : ndarray of int, shape (n,)
        ``opt_i = argmax_t gamma_it`` (the first on ties).
    optimal_sets_ : ndarray of bool, shape (n, T)
        All optimal tokens (ties within 1e-12 relative).
    selected_tokens_ : ndarray of int, shape (n,)
        ``alpha_i = argmax_t S(K_i p)_t`` on the training inputs.
    mm_direction_ : ndarray of shape (k,) or None
        Unit ``p^mm(alpha)`` of the selected tokens (ATT-SVM); ``None`` when
        they are not separable.
    gmm_direction_ : ndarray of shape (k,) or None
        Unit ``p^mm*`` of the optimal tokens (Def. 1; ATT-SVM' of App. D
        when some input has several); ``None`` when infeasible.
    svm_neighbors_ : ndarray of bool, shape (n, T) or None
        SVM-neighbors ``T_i`` of the selected tokens (Def. 2).
    is_locally_optimal_ : bool
        The selected tokens are locally optimal (Def. 2).
    min_score_gap_ : float
        ``min_{i, t in T_i} gamma_{i alpha_i} - gamma_it`` (Fig. 9(b)).
    convergence_ : {"global", "local", "other", "not-saturated"}
        The bars of Fig. 9: softmax not saturated (mean selected probability
        ``< 1 - 1e-5``, App. E); saturated on the optimal tokens (GMM);
        saturated on locally optimal tokens (LMM); saturated otherwise.
    attention_saturation_ : float
        ``mean_i max_t S(K_i p)_t``.
    alignment_ : float
        Cosine of the fitted query (``W^T u`` for ``train="W"``) with
        ``mm_direction_`` (nan when it is None).
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``grad_norm``, ``norm``, ``saturation``,
        ``gmm_alignment`` (cosine with ``gmm_direction_``), ``alignment``
        (with ``mm_direction_``), ``time``; ``radius`` for the path; and
        ``query``, of shape (n_records, k), the recorded iterates of the
        fitted query (``W^T u`` for ``train="W"``), e.g. to draw trajectories.
    n_iter_ : int
    n_features_in_ : int
        Token dimension ``d``; for 2-D input ``(n, T)`` (read as ``n``
        sequences of ``T`` scalar tokens, the form scikit-learn's generic
        checks use) the number of columns ``T``.

    Examples
    --------
    >>> from skntp.attention import AttentionSelector
    >>> from skntp.datasets import make_attention_fig1a
    >>> data = make_attention_fig1a()
    >>> est = AttentionSelector(head=data.head, key_query=data.key_query,
    ...                         classes=[-1, 1]).fit(data.X, data.y)
    >>> est.convergence_, round(est.alignment_, 3)
    ('global', 1.0)
    """

    _parameter_constraints = {
        "head": [None, "array-like"],
        "key_query": [None, "array-like"],
        "train": [StrOptions({"p", "W"})],
        "loss": [StrOptions(set(LOSSES))],
        "solver": [StrOptions({"gd", "ngd", "regpath", "svm"})],
        "query_init": [None, StrOptions({"zeros", "random"}), "array-like"],
        "svm_radius": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "max_optimal_choices": [Interval(Integral, 1, None, closed="left")],
        "classes": [None, "array-like"],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(
        self,
        head=None,
        key_query=None,
        *,
        train="p",
        loss="logistic",
        solver="ngd",
        query_init=None,
        lr=0.1,
        max_iter=1000,
        tol=0.0,
        svm_radius="auto",
        path_radii=None,
        max_optimal_choices=4096,
        classes=None,
        svm_method="auto",
        record_every=10,
        backend="numpy",
        device=None,
        dtype="float64",
        random_state=None,
        verbose=0,
    ):
        self.head = head
        self.key_query = key_query
        self.train = train
        self.loss = loss
        self.solver = solver
        self.query_init = query_init
        self.lr = lr
        self.max_iter = max_iter
        self.tol = tol
        self.svm_radius = svm_radius
        self.path_radii = path_radii
        self.max_optimal_choices = max_optimal_choices
        self.classes = classes
        self.svm_method = svm_method
        self.record_every = record_every
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ input
    def _validate_X(self, X, reset):
        two_d = False
        if not isinstance(X, (np.ndarray, list, tuple)) and hasattr(X, "__array__") \
                and not hasattr(X, "columns"):
            X = np.asarray(X)
        if hasattr(X, "shape") and len(X.shape) == 1:
            raise ValueError(
                f"Expected a 3-D array (n_samples, seq_len, n_features), a 2-D array "
                f"(n_samples, seq_len) or a list of 2-D sequences; got a 1-D array of "
                f"shape {X.shape}. Reshape your data either using array.reshape(-1, 1) "
                "if your data has a single feature or array.reshape(1, -1) if it "
                "contains a single sample.")
        if hasattr(X, "shape") and len(X.shape) == 2:
            two_d = True
        elif isinstance(X, (list, tuple)) and len(X) and not any(
                np.ndim(s) >= 2 for s in X):
            try:
                two_d = np.asarray(X, dtype=float).ndim == 2
            except (TypeError, ValueError):
                two_d = False
        if two_d and (reset or getattr(self, "_input_2d", False)):
            X2 = validate_data(self, X, reset=reset, dtype=np.float64)
            if reset:
                self._input_2d = True
                self._token_dim = 1
            return X2[:, :, None], np.ones(X2.shape, dtype=bool)
        arr, mask = check_sequences(
            np.asarray(X, dtype=float) if two_d else X,
            n_features=None if reset else self._token_dim,
        )
        if reset:
            self._input_2d = False
            self._token_dim = arr.shape[2]
            self.n_features_in_ = arr.shape[2]
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        return arr, mask

    def _targets(self, y, n):
        y = column_or_1d(y, warn=True)
        if y.shape[0] != n:
            raise ValueError(f"X has {n} sequences but y has {y.shape[0]} labels.")
        check_classification_targets(y)
        if self.classes is not None:
            classes = np.unique(np.asarray(self.classes))
            if classes.shape[0] != 2:
                raise ValueError(f"classes must name exactly 2 labels, got {self.classes!r}.")
            unknown = ~np.isin(y, classes)
            if unknown.any():
                raise ValueError(f"labels {np.unique(y[unknown])[:10]!r} are not in "
                                 f"classes={classes!r}.")
            return classes, np.where(y == classes[1], 1.0, -1.0)
        classes = np.unique(y)
        if classes.shape[0] == 1:
            raise ValueError(
                "AttentionSelector needs 2 classes in y; got 1 class: "
                f"{classes[0]!r}. The labels are mapped to Y = -1/+1; to fit inputs "
                "of one label (e.g. n = 1, Thm. 2) name both with classes=[-1, 1]."
            )
        if classes.shape[0] > 2:
            raise ValueError(
                "Only binary classification is supported: AttentionSelector's labels "
                f"are Y in {{-1, +1}} (Sec. 1.1); y has {classes.shape[0]} classes."
            )
        return classes, np.where(y == classes[1], 1.0, -1.0)

    def _head(self, X, mask, Y, d):
        if self.head is not None:
            v = np.asarray(self.head, dtype=float).ravel()
            if v.shape != (d,):
                raise ValueError(f"head must have shape ({d},) (the token dimension), "
                                 f"got {np.shape(self.head)}.")
            if not np.all(np.isfinite(v)):
                raise ValueError("head contains NaN or infinity.")
            return v
        pooled = (X * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        v = pooled[Y > 0].mean(0) - pooled[Y < 0].mean(0)
        nv = np.linalg.norm(v)
        if nv == 0 or not np.isfinite(nv):
            v = np.zeros(d)
            v[0] = 1.0
            return v
        return v / nv

    def _key_query(self, d):
        if self.key_query is None:
            return np.eye(d)
        W = np.asarray(self.key_query, dtype=float)
        if W.ndim != 2 or W.shape[1] != d:
            raise ValueError(f"key_query must have shape (k, {d}) (d the token "
                             f"dimension), got {W.shape}.")
        if not np.all(np.isfinite(W)):
            raise ValueError("key_query contains NaN or infinity.")
        return W

    def _query_init(self, k, rng, fixed):
        qi = self.query_init
        if isinstance(qi, str):
            if qi == "random":
                return rng.standard_normal(k) / np.sqrt(k)
            if fixed:
                raise ValueError("train='W' needs a non-zero fixed query: query_init "
                                 "cannot be 'zeros'.")
            return np.zeros(k)
        if qi is None:
            return np.full(k, 1.0 / np.sqrt(k)) if fixed else np.zeros(k)
        q = np.asarray(qi, dtype=float).ravel()
        if q.shape != (k,):
            raise ValueError(f"query_init must have shape ({k},), got {np.shape(qi)}.")
        if not np.all(np.isfinite(q)):
            raise ValueError("query_init contains NaN or infinity.")
        if fixed and not np.any(q):
            raise ValueError("train='W' needs a non-zero fixed query u = query_init.")
        return q

    # -------------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the attention weights by the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n, T, d), list of (T_i, d) arrays, or (n, T)
            Input sequences (lengths may differ in a list; they are padded
            and the padding gets zero attention).  A 2-D array is read as
            ``n`` sequences of ``T`` scalar tokens (``d = 1``).
        y : array-like of shape (n,)
            Two classes, mapped to ``-1, +1`` in the order of ``classes_``.
        sample_weight : array-like of shape (n,), default=None
            Weights of the inputs in the risk.

        Returns
        -------
        self
        """
        Xp, mask = self._validate_X(X, reset=True)
        n, T, d = Xp.shape
        self.classes_, Y = self._targets(y, n)
        sw = _check_sample_weight(sample_weight, np.empty((n, 1)), dtype=np.float64,
                                  ensure_non_negative=True)
        if not sw.sum() > 0:
            raise ValueError("sample_weight is zero for every input; nothing to fit.")
        v = self._head(Xp, mask, Y, d)
        W = self._key_query(d)
        self.head_ = v
        scores = np.where(mask, Y[:, None] * (Xp @ v), -np.inf)
        self.token_scores_ = scores
        self.optimal_tokens_ = np.argmax(scores, axis=1)
        top = scores.max(axis=1, keepdims=True)
        self.optimal_sets_ = mask & (scores >= top - 1e-12 * (1 + np.abs(top)))
        svm_keys = Xp @ W.T if self.train == "p" else Xp
        self._fit_gmm(svm_keys, mask)
        rng = check_random_state(self.random_state)
        if self.solver == "svm":
            q = self._fit_svm(W, T, rng)
        else:
            q = self._fit_gradient(Xp, mask, Y, sw, v, W, rng)
        rep = diagnose_selection(svm_keys, np.where(mask, scores, 0.0), q, mask=mask,
                                 optimal=self.optimal_sets_, method=self.svm_method)
        self.selected_tokens_ = rep["selected"]
        self.attention_saturation_ = rep["saturation"]
        self.mm_direction_ = None if rep["mm"] is None else rep["mm"] / np.linalg.norm(
            rep["mm"])
        self.svm_neighbors_ = rep["neighbors"]
        self.is_locally_optimal_ = bool(rep["locally_optimal"])
        self.min_score_gap_ = rep["min_score_gap"]
        self.convergence_ = rep["convergence"]
        self.alignment_ = (alignment(q, self.mm_direction_)
                           if self.mm_direction_ is not None else float("nan"))
        if self.solver == "svm":
            risk, _ = attention_loss_grad(np, Xp, Xp @ self.key_query_.T, Y, v, self.query_,
                                          mask=None if mask.all() else mask,
                                          loss=self.loss, sample_weight=sw, wrt=())
            self.history_["loss"] = np.array([float(risk)])
            self.history_["saturation"] = np.array([rep["saturation"]])
        iterates = getattr(self, "_iterates", None)
        if iterates is not None:
            self.history_["query"] = np.stack(iterates)
            self.history_["alignment"] = np.array(
                [alignment(it, self.mm_direction_) if self.mm_direction_ is not None
                 else np.nan for it in iterates])
            del self._iterates
        return self

    def _fit_gmm(self, keys, mask):
        optimal = self.optimal_sets_
        self.gmm_direction_ = None
        self._gmm = None
        ties = np.flatnonzero(optimal.sum(axis=1) > 1)
        strict = self.solver == "svm"
        progress = limit_progress(self, "ATT-SVM (GMM)")
        try:
            if ties.size == 0:
                p = att_svm(keys, self.optimal_tokens_, mask=mask, method=self.svm_method,
                            callback=progress)
            else:
                count = math.prod(int(c) for c in optimal.sum(axis=1))
                p, alpha, n_best = att_svm_prime(
                    keys, optimal, mask=mask, method=self.svm_method,
                    max_combinations=self.max_optimal_choices)
                msg = (f"inputs {ties[:10].tolist()} have several optimal tokens (tied "
                       "scores), so (ATT-SVM) is replaced by the non-convex (ATT-SVM') "
                       f"of App. D, solved exactly by enumerating the {count} choices of "
                       "one optimal token per input")
                if n_best > 1:
                    msg += (f"; {n_best} choices reach the minimal norm, so the GMM "
                            "direction is not unique and gmm_direction_ is one of them")
                warnings.warn(msg + ".", UserWarning, stacklevel=3)
        except NotSeparableError as exc:
            if strict:
                raise NotSeparableError(
                    f"solver='svm' needs the GMM direction: {exc}") from exc
            warnings.warn(f"{exc} gmm_direction_ is None.", UserWarning, stacklevel=3)
            return
        except ValueError as exc:  # too many tied choices
            if strict:
                raise
            warnings.warn(f"{exc} gmm_direction_ is None.", UserWarning, stacklevel=3)
            return
        finally:
            close_progress(progress)
        nrm = float(np.linalg.norm(p))
        if nrm == 0:
            if strict:
                raise NotSeparableError("solver='svm': p^mm* is zero (every input has "
                                        "only optimal tokens); there is no direction.")
            return
        self._gmm = p
        self.gmm_direction_ = p / nrm

    def _fit_svm(self, W, T, rng):
        R = (float(self.svm_radius) if self.svm_radius != "auto"
             else (_SVM_NATS + math.log(max(T, 1))) * float(np.linalg.norm(self._gmm)))
        self.svm_radius_ = R
        q = R * self.gmm_direction_
        if self.train == "p":
            self.query_ = q
            self.key_query_ = W
        else:
            u = self._query_init(W.shape[0], rng, fixed=True)
            self.query_ = u
            self.key_query_ = np.outer(u, q) / float(u @ u)
        self.n_iter_ = 0
        self.history_ = {"iteration": np.array([0.0]),
                         "norm": np.array([np.linalg.norm(q)]),
                         "gmm_alignment": np.array([1.0])}
        self._iterates = [q]
        return q

    def _fit_gradient(self, Xp, mask, Y, sw, v, W, rng):
        be = backend_of(self)
        xp = be.xp
        full = bool(mask.all())
        maskb = None if full else be.asbool(mask)
        Xb = be.asarray(Xp)
        identity = self.key_query is None
        uniform = bool(np.all(sw == sw[0]))
        common = {"mask": maskb, "loss": self.loss, "v": be.asarray(v),
                  "sample_weight": None if uniform else be.asarray(sw)}
        radii = None
        if self.solver == "regpath":
            if self.path_radii is None and self._gmm is not None:
                radii = np.geomspace(0.1, 30.0, 16) * float(np.linalg.norm(self._gmm))
            else:
                radii = default_radii(self.path_radii)
        lr = self.lr
        if self.train == "p":
            p0 = self._query_init(W.shape[0], rng, fixed=False)
            obj = AttentionObjective(xp, Xb, be.asarray(Y), W=None if identity else
                                     be.asarray(W), train=("p",), **common)
            params0 = (be.asarray(p0),)

            def effective(params):
                return params[0]
        else:
            u = self._query_init(W.shape[0], rng, fixed=True)
            nu = float(np.linalg.norm(u))
            ub = be.asarray(u)
            obj = AttentionObjective(xp, Xb, be.asarray(Y), p=ub, train=("W",), **common)
            params0 = (be.asarray(W),)
            lr = self.lr / nu**2 if self.solver == "gd" else self.lr / nu
            if radii is not None:
                radii = radii / nu

            def effective(params):
                return params[0].T @ ub
        keys_eff = Xb  # the effective query acts on X (train="W") or on X W^T
        if self.train == "p" and not identity:
            keys_eff = Xb @ be.asarray(W).T
        gmm = None if self.gmm_direction_ is None else be.asarray(self.gmm_direction_)
        iterates = []

        def metrics(params):
            q = effective(params)
            nq = float(xp.sqrt(xp.sum(q * q)))
            s = attention_weights(xp, keys_eff, q, maskb)
            row = {"norm": nq, "saturation": float(xp.mean(xp.max(s, axis=1)))}
            if gmm is not None:
                row["gmm_alignment"] = float(xp.sum(q * gmm)) / nq if nq > 0 else 0.0
            iterates.append(np.asarray(to_numpy(q), dtype=float))
            return row

        if self.solver == "regpath":
            # the path of the non-convex risk (2): every radius also from R p^mm*
            # (Thm. 1), each solve on the risk divided by its gradient norm
            extra = ()
            if self.gmm_direction_ is not None:
                extra = ((gmm,),) if self.train == "p" else (
                    (be.asarray(np.outer(u, self.gmm_direction_) / nu),),)
            result = minimize(obj, params0, xp=xp, solver="regpath", radii=radii,
                              tol=self.tol, inner_max_iter=self.max_iter, metrics=metrics,
                              starts=extra, rescale=True)
        else:
            result = minimize(obj, params0, xp=xp, solver=self.solver, lr=lr,
                              max_iter=self.max_iter, tol=self.tol, metrics=metrics,
                              record_every=self.record_every, inner_max_iter=self.max_iter,
                              progress=make_progress(self.verbose, self.max_iter,
                                                     desc=self.solver))
        final = np.asarray(to_numpy(result.params[0]), dtype=np.float64)
        if self.train == "p":
            self.query_ = final
            self.key_query_ = W
            q = final
        else:
            self.query_ = u
            self.key_query_ = final
            q = final.T @ u
        self.n_iter_ = result.n_iter
        self.history_ = result.history
        n_rec = len(self.history_["iteration"])
        self._iterates = iterates[-n_rec:]
        return q

    # ---------------------------------------------------------------- predict
    def _forward(self, X):
        check_is_fitted(self)
        Xp, mask = self._validate_X(X, reset=False)
        K = Xp @ self.key_query_.T
        s = attention_weights(np, K, self.query_, None if mask.all() else mask)
        return Xp, s

    def attention(self, X):
        """Softmax attention ``S(K_i p)`` of every input, shape (n, T) (0 at padding)."""
        return self._forward(X)[1]

    def transform(self, X):
        """Attention features ``X_i^T S(K_i p)``, shape (n, d) (eq. (5) before ``v``)."""
        Xp, s = self._forward(X)
        return attention_features(np, Xp, s)

    def decision_function(self, X):
        """``f(X_i) = v^T X_i^T S(K_i p)``, shape (n,); positive means ``classes_[1]``."""
        return self.transform(X) @ self.head_

    def predict(self, X):
        """``classes_[1]`` where ``f(X) > 0``, else ``classes_[0]``."""
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]

    def _is_logistic(self):
        return self.loss == "logistic"

    @available_if(_is_logistic)
    def predict_proba(self, X):
        """``[1 - sigmoid(f), sigmoid(f)]`` (only for the logistic loss)."""
        f = self.decision_function(X)
        p1 = np.where(f >= 0, 1 / (1 + np.exp(-np.abs(f))),
                      np.exp(-np.abs(f)) / (1 + np.exp(-np.abs(f))))
        return np.column_stack([1 - p1, p1])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags


def attention_trials(X, y, head, *, loss="logistic", solver="ngd", lr=1.0, max_iter=1000,
                     reduce=True, method="auto", threshold=SATURATION_THRESHOLD,
                     backend="numpy", device=None, dtype="float64"):
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
    threshold : float, default=1 - 1e-5
        Saturation threshold of App. E.
    backend, device, dtype :
        Array layer of the training loop.

    Returns
    -------
    dict of ndarray, each of shape (B,)
        ``convergence`` (str), ``saturation``, ``correlation`` (cosine of
        ``p`` with ``p^mm(alpha)``, nan when infeasible), ``min_score_gap``,
        ``locally_optimal``, ``selects_optimal``, ``norm`` (``||p||``).
    """
    from ._backend import get_backend

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
                             loss=loss, train=("p",))
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


from ._joint import JointAttentionSVM  # noqa: E402  (Sec. 3 model, same inputs)
