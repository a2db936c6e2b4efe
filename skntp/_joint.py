"""Joint training of the head and the attention weights (Tarzanagh et al. 2023, Sec. 3)."""

from __future__ import annotations

import math
import warnings
from numbers import Integral, Real

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
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
from .models.attention import AttentionObjective, attention_decision, attention_weights
from .svm import NotSeparableError
from .svm._joint import head_svm, joint_svm, relaxed_att_svm, support_vectors

__all__ = ["JointAttentionSVM"]

_SATURATION_NATS = 20.0


def _unit_or_zero(w):
    nw = float(np.linalg.norm(w))
    return (w / nw if nw > 0 else np.zeros_like(w)), nw


class JointAttentionSVM(ClassifierMixin, TransformerMixin, BaseEstimator):
    """Attention with a trained head: ``f(X) = v^T X^T softmax(X W^T p)``, ``v`` and ``p`` jointly.

    The model of Tarzanagh et al. (2023), eq. (5), trained on the logistic
    loss (ERM) in the head ``v`` and the attention weights ``p`` together
    (Sec. 3), with a fixed key-query matrix ``W``.  Its implicit bias
    (Thms. 5-6): attention selects one token ``alpha_i`` per input, ``v``
    converges in direction to the head SVM ``v^mm`` on the selected tokens
    and ``p`` to ``p^relax`` of eq. (10), the ATT-SVM with margin 1 on the
    support vectors ``S`` of the head SVM and margin 0 on the others; when
    every selected token is a support vector ``p^relax = p^mm`` (Thm. 5).

    Parameters
    ----------
    solver : {"gd", "ngd", "regpath", "svm"}, default="ngd"
        ``"gd"``: gradient descent with step ``lr``; ``"ngd"``: normalized
        GD, each block ``v``, ``p`` moved by ``lr`` along its own normalized
        gradient (as in the paper's experiments, App. E; computed from
        ``grad log L``, the same direction, so it never underflows); ``"regpath"``: the
        ridge-constrained solutions ``argmin_{||v|| <= r, ||p|| <= R} L(v, p)``
        over the increasing grid ``path_radii`` (Thms. 5-6), each warm-started
        from the last and solved on ``log L`` (same minimizers, better scaled);
        ``"svm"``: the explicit limit, ``head_ = svm_radius * head_mm_direction_``
        and ``query_ = svm_radius * mm_direction_``, with the selected tokens
        chosen by :func:`skntp.svm.joint_svm` (largest label margin).
    key_query : array-like of shape (k, d), default=None
        The fixed key-query matrix ``W`` (keys ``K_i = X_i W^T``); ``None`` is
        the identity.
    head_init : array-like of shape (d,), default=None
        Starting head ``v_0``; ``None`` draws ``N(0, I/d)`` from ``random_state``.
    query_init : array-like of shape (k,), default=None
        Starting attention weights ``p_0``; ``None`` draws ``N(0, I/k)``.
    lr : float, default=0.1
        Step size (the paper's Fig. 3 uses normalized GD with 0.1).
    max_iter : int, default=1000
        Iterations of the gradient solvers; inner iterations per radius for
        ``"regpath"``.
    tol : float, default=0.0
        Stop when the gradient norm falls to ``tol``.  On separable data the
        iterates diverge by design, so ``max_iter`` is the horizon.
    path_radii : array-like of shape (n_radii,) or (n_radii, 2), default=None
        Radii ``(r, R)`` of the path (one column: the same radius for both);
        ``None`` uses ``geomspace(0.5, 20, 12)``.
    svm_radius : "auto" or float, default="auto"
        Norm of ``head_`` and ``query_`` for ``solver="svm"``.  "auto" takes,
        for ``p``, the smallest norm at which every strictly separated selected
        token gets attention ``>= 1 - T e^{-20}``, and for ``v`` the norm at which
        every selected token has label margin 20 (logistic loss ``<= e^{-20}``).
    max_enumeration : int, default=256
        Largest number of token choices ``prod_i T_i`` searched exhaustively by
        ``solver="svm"`` (above it, the alternating heuristic of
        :func:`skntp.svm.joint_svm`).
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
        Seeds the random starting point.
    verbose : int, default=0
        ``> 0`` draws a progress bar of the gradient solvers on stderr.

    Attributes
    ----------
    classes_ : ndarray of shape (2,)
        Labels; ``classes_[1]`` is ``Y = +1``.
    head_ : ndarray of shape (d,)
        The head ``v``.
    query_ : ndarray of shape (k,)
        The attention weights ``p``.
    key_query_ : ndarray of shape (k, d)
        ``W`` (the identity when ``key_query=None``).
    selected_tokens_ : ndarray of shape (n,), int
        ``alpha_i``: the token of largest attention of every training input
        (for ``solver="svm"``, the tokens of largest label margin).
    head_mm_direction_ : ndarray of shape (d,) or None
        Unit ``v^mm``: the hard-margin SVM without bias (Sec. 3, (SVM)) on the
        selected tokens; ``None`` when they are not linearly separable.
    label_margin_ : float
        ``1 / ||v^mm||`` (0 when not separable).
    support_ : ndarray of int
        Indices of the training inputs whose selected token is a support
        vector of the head SVM (the set ``S`` of Sec. 3.2).
    support_vectors_ : ndarray of shape (n_support, d)
        Those tokens ``x_{i alpha_i}``, ``i in S``.
    mm_direction_ : ndarray of shape (k,) or None
        Unit ``p^relax`` of eq. (10) (equal to ``p^mm`` when every selected
        token is a support vector); ``None`` when infeasible.
    att_svm_direction_ : ndarray of shape (k,) or None
        Unit ``p^mm(alpha)`` of (ATT-SVM); ``None`` when infeasible.
    alignment_ : float
        Cosine of ``query_`` with ``mm_direction_`` (nan without a direction).
    head_alignment_ : float
        Cosine of ``head_`` with ``head_mm_direction_`` (nan without one).
    attention_saturation_ : float
        Mean over training inputs of the largest attention weight.
    history_ : dict of ndarray
        Per recorded iteration: ``iteration``, ``loss``, ``grad_norm``,
        ``time``, ``norm`` (``||p||``), ``head_norm``, ``attention_saturation``
        (Fig. 3(c), red), ``label_probability`` (mean ``sigmoid(Y f)``,
        Fig. 3(c), blue), ``alignment`` (``p`` with ``mm_direction_``),
        ``head_alignment``, ``att_svm_alignment`` (``p`` with
        ``att_svm_direction_``), and the trajectories ``query`` (n_records, k)
        and ``head`` (n_records, d).  ``"ngd"`` and ``"regpath"`` run on
        ``log L`` (same normalized steps, same constrained minimizers, no
        underflow at large norms): they add ``log_loss``, and their
        ``grad_norm`` is that of ``grad log L = grad L / L``; ``"regpath"``
        also adds ``radius_0`` (``r``, the head's) and ``radius_1`` (``R``).
    n_iter_ : int
    n_features_in_ : int
        Token dimension ``d`` for 3-D and list inputs; for a 2-D input
        ``(n, T)`` of scalar tokens, its number of columns ``T``.

    Notes
    -----
    ``X`` is a 3-D array ``(n, T, d)`` or a list of ``(T_i, d)`` arrays (lengths
    may differ; padded tokens get no attention).  A 2-D array ``(n, T)`` is read
    as ``n`` sequences of ``T`` scalar tokens (``d = 1``).
    """

    _parameter_constraints = {
        "solver": [StrOptions({"gd", "ngd", "regpath", "svm"})],
        "key_query": ["array-like", None],
        "head_init": ["array-like", None],
        "query_init": ["array-like", None],
        "svm_radius": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "max_enumeration": [Interval(Integral, 1, None, closed="left")],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(
        self,
        solver="ngd",
        *,
        key_query=None,
        head_init=None,
        query_init=None,
        lr=0.1,
        max_iter=1000,
        tol=0.0,
        path_radii=None,
        svm_radius="auto",
        max_enumeration=256,
        svm_method="auto",
        record_every=10,
        backend="numpy",
        device=None,
        dtype="float64",
        random_state=None,
        verbose=0,
    ):
        self.solver = solver
        self.key_query = key_query
        self.head_init = head_init
        self.query_init = query_init
        self.lr = lr
        self.max_iter = max_iter
        self.tol = tol
        self.path_radii = path_radii
        self.svm_radius = svm_radius
        self.max_enumeration = max_enumeration
        self.svm_method = svm_method
        self.record_every = record_every
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ data
    def _key_query(self, d):
        if self.key_query is None:
            return np.eye(d)
        W = np.asarray(self.key_query, dtype=float)
        if W.ndim != 2 or W.shape[1] != d:
            raise ValueError(
                f"key_query must have shape (k, {d}) for tokens of dimension {d}, "
                f"got shape {W.shape}."
            )
        if not np.all(np.isfinite(W)):
            raise ValueError("key_query contains NaN or infinity.")
        return W

    def _init(self, value, size, name, rng):
        if value is None:
            return rng.standard_normal(size) / np.sqrt(size)
        arr = np.asarray(value, dtype=float)
        if arr.shape != (size,):
            raise ValueError(f"{name} must have shape ({size},), got {arr.shape}.")
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name} contains NaN or infinity.")
        return arr.copy()

    def _validate_X(self, X, reset):
        """``(padded, mask)`` from any accepted input (see Notes).

        A 2-D input goes through :func:`~sklearn.utils.validation.validate_data`
        (so ``n_features_in_`` is its number of columns ``T``, and predictions
        need the same ``T``); 3-D and list inputs through
        :func:`~skntp._sequences.check_sequences` (``n_features_in_ = d``).
        """
        if not reset:
            check_is_fitted(self)
        if hasattr(X, "__array__") and not hasattr(X, "shape"):
            X = np.asarray(X)
        ndim = len(X.shape) if hasattr(X, "shape") else None
        if ndim is None and isinstance(X, (list, tuple)) and len(X) and not any(
                np.ndim(s) >= 2 for s in X):
            try:
                ndim = np.asarray(X, dtype=float).ndim
            except (TypeError, ValueError):
                ndim = None
        if ndim == 1:
            raise ValueError(
                "Expected a 2-D array (n_samples, seq_len) of scalar tokens, a 3-D array "
                "(n_samples, seq_len, n_features) or a list of 2-D arrays, got a 1-D "
                "array. Reshape your data."
            )
        if ndim == 2 and (reset or getattr(self, "_input_2d", False)):
            X2 = validate_data(self, X, reset=reset, dtype=np.float64)
            if reset:
                self._input_2d, self._token_dim = True, 1
            return X2[:, :, None], np.ones(X2.shape, dtype=bool)
        arr, mask = check_sequences(
            np.asarray(X, dtype=float) if ndim == 2 else X,
            n_features=None if reset else self._token_dim,
        )
        if reset:
            self._input_2d, self._token_dim = False, arr.shape[2]
            self.n_features_in_ = arr.shape[2]
            if hasattr(self, "feature_names_in_"):
                del self.feature_names_in_
        return arr, mask

    def _labels(self, y, n):
        y = column_or_1d(y, warn=True)
        if y.shape[0] != n:
            raise ValueError(f"X has {n} sequences but y has {y.shape[0]} labels.")
        check_classification_targets(y)
        classes = np.unique(y)
        if classes.shape[0] != 2:
            raise ValueError(
                "Only binary classification is supported: JointAttentionSVM's labels are "
                "Y in {-1, +1}, but y has "
                f"{classes.shape[0]} class(es): {classes[:10]!r}."
            )
        return classes, np.where(y == classes[1], 1.0, -1.0)

    # ----------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y):
        """Fit ``v`` and ``p`` by the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n, T, d), list of (T_i, d) arrays, or (n, T)
            Token sequences (see Notes).
        y : array-like of shape (n,)
            Two classes; ``classes_[1]`` is mapped to ``Y = +1``.

        Returns
        -------
        self
        """
        X, mask = self._validate_X(X, reset=True)
        n, T, d = X.shape
        classes, y_pm = self._labels(y, n)
        W = self._key_query(d)
        K = X @ W.T
        self.classes_ = classes
        self.key_query_ = W
        if self.solver == "svm":
            self._fit_svm(X, K, y_pm, mask)
        else:
            self._fit_gradient(X, K, y_pm, mask)
        s = attention_weights(np, K, self.query_, mask)
        self.attention_saturation_ = float(s.max(axis=1).mean())
        self.alignment_ = (alignment(self.query_, self.mm_direction_)
                           if self.mm_direction_ is not None else float("nan"))
        self.head_alignment_ = (alignment(self.head_, self.head_mm_direction_)
                                if self.head_mm_direction_ is not None else float("nan"))
        return self

    def _set_directions(self, X, K, y, mask, selected, head=None, relaxed=None, att=None,
                        support=None):
        """Set ``selected_tokens_`` and every limit direction for ``selected``."""
        progress = None
        if head is None or relaxed is None or att is None:
            progress = limit_progress(self, "head SVM, (relaxed) ATT-SVM")
        try:
            self._solve_directions(X, K, y, mask, selected, head, relaxed, att, support,
                                   {"method": self.svm_method, "callback": progress})
        finally:
            close_progress(progress)

    def _solve_directions(self, X, K, y, mask, selected, head, relaxed, att, support, kw):
        rows = np.arange(X.shape[0])
        tokens = X[rows, selected]
        self.selected_tokens_ = np.asarray(selected, dtype=np.int64)
        self.head_mm_direction_ = self.mm_direction_ = self.att_svm_direction_ = None
        self.label_margin_ = 0.0
        self.support_ = np.zeros(0, dtype=np.int64)
        self.support_vectors_ = np.zeros((0, X.shape[2]))
        try:
            if head is None:
                head = head_svm(tokens, y, **kw)
        except NotSeparableError as exc:
            warnings.warn(
                f"{str(exc).rstrip('.')}. The selected tokens (largest attention) admit no head "
                "max-margin direction: head_mm_direction_, mm_direction_ and "
                "att_svm_direction_ are None.",
                UserWarning,
                stacklevel=4,
            )
            return
        self.head_mm_direction_, nv = _unit_or_zero(head)
        self.label_margin_ = 1.0 / nv if nv > 0 else float("inf")
        if support is None:
            support = support_vectors(tokens, y, head)
        self.support_ = np.flatnonzero(support)
        self.support_vectors_ = tokens[support]
        problems = []
        if att is None:
            try:
                att = relaxed_att_svm(K, selected, mask=mask, **kw)
            except NotSeparableError as exc:
                problems.append(str(exc))
        if att is not None:
            self.att_svm_direction_ = _unit_or_zero(att)[0]
        if relaxed is None:
            if att is not None and support.all():
                relaxed = att
            else:
                try:
                    relaxed = relaxed_att_svm(K, selected, support, mask=mask, **kw)
                except NotSeparableError as exc:
                    problems.append(str(exc))
        if relaxed is not None:
            self.mm_direction_ = _unit_or_zero(relaxed)[0]
        if problems:
            warnings.warn(
                " ".join(problems) + " The corresponding direction is None.",
                UserWarning,
                stacklevel=4,
            )

    def _radii(self, X, K, y, mask):
        if self.svm_radius != "auto":
            return float(self.svm_radius), float(self.svm_radius)
        n, T = mask.shape
        rows = np.arange(n)
        p = self.mm_direction_
        gaps = (K[rows, self.selected_tokens_][:, None, :] - K) @ p
        other = mask.copy()
        other[rows, self.selected_tokens_] = False
        gaps = gaps[other]
        gaps = gaps[gaps > 1e-9 * max(1.0, float(np.abs(gaps).max(initial=0.0)))]
        R_p = (_SATURATION_NATS / float(gaps.min())) if gaps.size else 0.0
        R_v = _SATURATION_NATS / self.label_margin_ if self.label_margin_ > 0 else 0.0
        return R_v, R_p

    def _fit_svm(self, X, K, y, mask):
        progress = limit_progress(self, "joint SVM")
        try:
            res = joint_svm(X, y, K, mask=mask, max_enumeration=self.max_enumeration,
                            method=self.svm_method, callback=progress)
        finally:
            close_progress(progress)
        self.joint_svm_result_ = res
        self._set_directions(X, K, y, mask, res.selected, head=res.head,
                             relaxed=res.relaxed, att=res.att_svm, support=res.support)
        R_v, R_p = self._radii(X, K, y, mask)
        self.svm_radius_ = (R_v, R_p)
        self.head_ = R_v * self.head_mm_direction_
        self.query_ = R_p * self.mm_direction_
        self.n_iter_ = 0
        be = backend_of(self)
        obj = self._objective(be, X, y, mask, log=False)
        loss = float(obj((be.asarray(self.head_), be.asarray(self.query_)))[0])
        s = attention_weights(np, K, self.query_, mask)
        f = np.einsum("nt,ntd,d->n", s, X, self.head_)
        self.history_ = {
            "iteration": np.array([0.0]),
            "loss": np.array([loss]),
            "norm": np.array([np.linalg.norm(self.query_)]),
            "head_norm": np.array([np.linalg.norm(self.head_)]),
            "attention_saturation": np.array([s.max(axis=1).mean()]),
            "label_probability": np.array([expit(y * f).mean()]),
            "alignment": np.array([1.0 if R_p > 0 else 0.0]),
            "head_alignment": np.array([1.0 if R_v > 0 else 0.0]),
            "att_svm_alignment": np.array([alignment(self.query_, self.att_svm_direction_)]),
            "query": self.query_[None].copy(),
            "head": self.head_[None].copy(),
        }

    def _fit_gradient(self, X, K, y, mask):
        n, T, d = X.shape
        k = K.shape[2]
        rng = check_random_state(self.random_state)
        v0 = self._init(self.head_init, d, "head_init", rng)
        p0 = self._init(self.query_init, k, "query_init", rng)
        be = backend_of(self)
        xp = be.xp
        regpath = self.solver == "regpath"
        # log L has the same minimizers on every ball (regpath) and the same
        # normalized gradient in every block (ngd), and does not underflow.
        use_log = self.solver in ("regpath", "ngd")
        objective = self._objective(be, X, y, mask, log=use_log)
        Xb, Kb, maskb = objective.X, objective.K, objective.mask
        traj_v, traj_p = [], []

        def metrics(params):
            v, p = params
            s = attention_weights(xp, Kb, p, maskb)
            f = attention_decision(xp, Xb, Kb, v, p, maskb)
            vn, pn = to_numpy(v).astype(float), to_numpy(p).astype(float)
            traj_v.append(vn.copy())
            traj_p.append(pn.copy())
            return {
                "norm": float(np.linalg.norm(pn)),
                "head_norm": float(np.linalg.norm(vn)),
                "attention_saturation": float(xp.mean(xp.max(s, axis=1))),
                "label_probability": float(np.mean(expit(y * to_numpy(f)))),
            }

        radii = None
        if regpath:
            radii = default_radii(self.path_radii, start=0.5, stop=20.0, num=12)
            if radii.ndim == 2 and radii.shape[1] not in (1, 2):
                raise ValueError(
                    f"path_radii must have shape (n_radii,) or (n_radii, 2), got "
                    f"{radii.shape}."
                )
            if radii.ndim == 2 and np.any(np.diff(radii, axis=0) < 0):
                raise ValueError("path_radii must be increasing in every column.")
        result = minimize(
            objective,
            (be.asarray(v0), be.asarray(p0)),
            xp=xp,
            solver=self.solver,
            lr=self.lr,
            max_iter=self.max_iter,
            tol=self.tol,
            metrics=metrics,
            record_every=self.record_every,
            radii=radii,
            inner_max_iter=self.max_iter,
            progress=None if regpath else self._progress(use_log),
        )
        self.head_ = np.asarray(to_numpy(result.params[0]), dtype=np.float64)
        self.query_ = np.asarray(to_numpy(result.params[1]), dtype=np.float64)
        self.n_iter_ = result.n_iter
        hist = result.history
        if use_log:
            hist["log_loss"] = hist["loss"]
            hist["loss"] = np.exp(hist["log_loss"])
        if regpath:
            if "radius_0" not in hist:
                hist["radius_0"] = hist["radius_1"] = hist["radius"]
        s = attention_weights(np, K, self.query_, mask)
        self._set_directions(X, K, y, mask, np.argmax(s, axis=1))
        Q, H = np.array(traj_p), np.array(traj_v)
        hist["query"], hist["head"] = Q, H
        hist["alignment"] = self._cosines(Q, self.mm_direction_)
        hist["head_alignment"] = self._cosines(H, self.head_mm_direction_)
        hist["att_svm_alignment"] = self._cosines(Q, self.att_svm_direction_)
        self.history_ = hist

    def _objective(self, be, X, y, mask, *, log):
        """The attention risk (ERM) in ``(v, p)`` with the logistic loss (Sec. 3)."""
        return AttentionObjective(
            be.xp, be.asarray(X), be.asarray(y), mask=be.asbool(mask), loss="logistic",
            W=be.asarray(self.key_query_), train=("v", "p"), log=log)

    def _progress(self, use_log):
        """The progress bar (``verbose > 0``), showing ``L`` rather than ``log L``."""
        bar = make_progress(self.verbose, self.max_iter, desc=self.solver)
        if bar is None or not use_log:
            return bar

        def progress(k, loss, row=None):
            bar(k, math.exp(loss), row)

        progress.close = getattr(bar, "close", lambda: None)
        return progress

    @staticmethod
    def _cosines(W, direction):
        if direction is None:
            return np.full(W.shape[0], np.nan)
        nw = np.linalg.norm(W, axis=1)
        nd = np.linalg.norm(direction)
        with np.errstate(invalid="ignore", divide="ignore"):
            out = (W @ direction) / (nw * nd)
        return np.where((nw > 0) & (nd > 0), out, 0.0)

    # ------------------------------------------------------------- predict
    def _validated(self, X):
        X, mask = self._validate_X(X, reset=False)
        return X, mask, X @ self.key_query_.T

    def attention(self, X):
        """Softmax attention ``S(K_i p)`` of shape (n, T) (zero at padding)."""
        X, mask, K = self._validated(X)
        return attention_weights(np, K, self.query_, mask)

    def transform(self, X):
        """Attention features ``X_i^T S(K_i p)`` of shape (n, d) (Sec. 3, ``x_i^p``)."""
        X, mask, K = self._validated(X)
        s = attention_weights(np, K, self.query_, mask)
        return np.einsum("nt,ntd->nd", s, X)

    def decision_function(self, X):
        """``f(X_i) = v^T X_i^T S(K_i p)`` of shape (n,); positive means ``classes_[1]``."""
        X, mask, K = self._validated(X)
        return attention_decision(np, X, K, self.head_, self.query_, mask)

    def predict_proba(self, X):
        """Logistic probabilities ``[1 - sigmoid(f), sigmoid(f)]`` of shape (n, 2)."""
        f = self.decision_function(X)
        return np.column_stack([expit(-f), expit(f)])

    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba` (finite at any norm)."""
        f = self.decision_function(X)
        return np.column_stack([-np.logaddexp(0.0, f), -np.logaddexp(0.0, -f)])

    def predict(self, X):
        """The class of the sign of :meth:`decision_function` (ties: ``classes_[0]``)."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags
