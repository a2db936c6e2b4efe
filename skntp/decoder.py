"""Next-token prediction with a linear decoder (Thrampoulidis, 2024)."""

from __future__ import annotations

import warnings
from numbers import Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    _check_sample_weight,
    check_is_fitted,
    check_random_state,
    validate_data,
)

from ._backend import log_softmax, row_chunks, to_numpy
from ._base import (
    BACKEND_CONSTRAINTS,
    TRAINING_CONSTRAINTS,
    backend_kwargs,
    backend_of,
    limit_progress,
    train,
)
from ._progress import close_progress
from .metrics import SubspaceProjector, alignment, history_metrics
from .models.decoder import CrossEntropy, aggregate_contexts, ntp_cross_entropy
from .svm import NotSeparableError, ProgramTooLargeError, log_odds_problem, solve_ntp_svm
from .svm._core import solve_min_norm

__all__ = ["NTPDecoderClassifier", "aggregate_contexts", "ntp_cross_entropy"]

_DENSE_PROBS_MAX = 1_000_000
_SATURATION_NATS = 20.0


class NTPDecoderClassifier(ClassifierMixin, BaseEstimator):
    """Next-token prediction with a linear decoder ``W`` on fixed context embeddings.

    The model predicts ``softmax(W h)`` for a context embedding ``h`` and is
    trained on the NTP cross-entropy (Thrampoulidis 2024, eq. (2)) over the
    *distinct* contexts of the data.  It can be fitted *implicitly*, by a
    gradient method, or *explicitly*, by its limit (Thm. 4.1 and Thm. A.3):
    ``W_k ~ W* + R_k W^mm / ||W^mm||`` with ``W*`` the finite component (the
    solution in ``F`` of eq. (3)) and ``W^mm`` the NTP-SVM solution.

    Parameters
    ----------
    solver : {"gd", "ngd", "adam", "regpath", "svm"}, default="gd"
        ``"gd"``: constant-step gradient descent; ``"ngd"``: normalized GD;
        ``"adam"``: Adam; ``"regpath"``: the regularization path
        ``argmin_{||W|| <= B} CE(W)`` over ``path_radii``; ``"svm"``: the
        explicit limit ``coef_ = finite_component_ + svm_radius * mm_direction_``.
    lr : float, default=0.5
        Step size (the paper uses 0.5 for GD and 0.01 for NGD and Adam).
    max_iter : int, default=1000
        Iterations of the gradient solvers; inner iterations per radius for
        ``"regpath"``.
    tol : float, default=0.0
        Stop when the gradient norm falls to ``tol``.  On NTP-separable data
        the iterates diverge in norm by design, so ``max_iter`` is the horizon
        and no :class:`~sklearn.exceptions.ConvergenceWarning` is raised for
        reaching it.
    vocabulary : None, int or array-like, default=None
        The token set ``V``: ``None`` for the labels seen (or the columns of
        soft labels), an int ``V`` for tokens ``0..V-1``, or an array of
        tokens.  Tokens never seen as a next token are out of support everywhere.
    svm_radius : "auto" or float, default="auto"
        ``R`` in ``coef_ = W* + R W^mm/||W^mm||`` for ``solver="svm"``.  "auto"
        takes the smallest ``R`` for which every out-of-support logit lies at
        least 20 nats below every in-support logit of its context (so every
        out-of-support probability is below ``exp(-20)``).
    path_radii : array-like, default=None
        Increasing radii ``B`` of the regularization path; ``None`` uses
        ``geomspace(0.5, 200, 24)``.
    compute_limits : bool, default=True
        Solve the NTP-SVM and the finite component during ``fit`` (needed for
        ``solver="svm"``, ``mm_direction_`` and the alignment history).
    svm_method : str, default="auto"
        Method of the max-margin core (``"auto"``, ``"cvxpy"``, ...).
    record_every : int, default=10
        Record the history every that many iterations (and always the first
        and the last).  Each record evaluates the metrics of ``history_``
        (alignment, projection onto the finite subspace, ...), which cost
        about one gradient step or more; every 10 iterations keeps that
        overhead under 20 % of the descent (``benchmarks/record_every.py``).
        Use 1 to record every iteration.
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
        Torch device (``"cpu"``, ``"cuda"``); only with ``backend="torch"``.
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the LeCun-normal initialization ``W_0 ~ N(0, 1/d)``.
    verbose : int, default=0

    Attributes
    ----------
    coef_ : ndarray of shape (V, d)
        The decoder ``W`` (rows are the learned word embeddings).
    classes_ : ndarray of shape (V,)
    contexts_ : ndarray of shape (m, d)
        Distinct context embeddings ``h_j``.
    context_weights_ : ndarray of shape (m,)
        Empirical context probabilities ``pi_j``.
    next_token_probs_ : ndarray or scipy.sparse.csr_matrix of shape (m, V)
        ``p_j`` (sparse when ``m * V`` exceeds one million).
    entropy_ : float
        The entropy lower bound ``H`` of the loss (Sec. 2).
    finite_component_ : ndarray of shape (V, d)
        ``W*``, the minimum-norm solution of eq. (3); lies in ``F`` (eq. (5)).
    mm_direction_ : ndarray of shape (V, d) or None
        ``W^mm/||W^mm||`` (unit Frobenius norm); ``None`` when the data are
        not NTP-separable.
    mm_margin_ : float
        ``1/||W^mm||``, the NTP-margin (0 when not separable).
    is_ntp_compatible_ : bool
        Eq. (3) has a solution (Def. 3.1).
    is_ntp_separable_ : bool
        The NTP-SVM is feasible (Def. 3.2).
    alignment_ : float
        Cosine of ``coef_ - finite_component_`` with ``mm_direction_``.
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``excess_loss`` (``loss - entropy_``),
        ``grad_norm``, ``norm``, ``alignment``, ``alignment_corrected`` and
        ``finite_distance`` (``||P_F(W_k) - W*||``), ``time``.
    n_iter_ : int
    svm_result_ : MaxMarginResult or None
        Duals, gap and iterations of the NTP-SVM solve.
    n_features_in_ : int

    Examples
    --------
    >>> from skntp import NTPDecoderClassifier
    >>> from skntp.datasets import make_ntp_data
    >>> X, y = make_ntp_data(n_samples=500, n_contexts=10, n_features=12,
    ...                      n_tokens=6, support_size=3, random_state=0)
    >>> gd = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=2000,
    ...                           random_state=0).fit(X, y)
    >>> round(gd.alignment_, 2) > 0.9
    True
    """

    _parameter_constraints = {
        "solver": [StrOptions({"gd", "ngd", "adam", "regpath", "svm"})],
        "vocabulary": [None, Interval(Real, 2, None, closed="left"), "array-like"],
        "svm_radius": [StrOptions({"auto"}), Interval(Real, 0, None, closed="left")],
        "compute_limits": ["boolean"],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(
        self,
        solver="gd",
        *,
        lr=0.5,
        max_iter=1000,
        tol=0.0,
        vocabulary=None,
        svm_radius="auto",
        path_radii=None,
        compute_limits=True,
        svm_method="auto",
        record_every=10,
        backend="numpy",
        device=None,
        dtype="float64",
        random_state=None,
        verbose=0,
    ):
        self.solver = solver
        self.lr = lr
        self.max_iter = max_iter
        self.tol = tol
        self.vocabulary = vocabulary
        self.svm_radius = svm_radius
        self.path_radii = path_radii
        self.compute_limits = compute_limits
        self.svm_method = svm_method
        self.record_every = record_every
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------------ data
    def _targets(self, y, n):
        """Return ``(classes, Y)``: the vocabulary and an (n, V) sparse target."""
        y_arr = np.asarray(y) if not sp.issparse(y) else y
        soft = sp.issparse(y_arr) or (y_arr.ndim == 2 and y_arr.shape[1] > 1)
        if soft:
            Y = sp.csr_matrix(y_arr, dtype=float)
            if Y.shape[0] != n:
                raise ValueError(
                    f"y has {Y.shape[0]} rows but X has {n} samples."
                )
            data = Y.data
            if not np.all(np.isfinite(data)):
                raise ValueError("soft labels y contain NaN or infinity.")
            if np.any(data < 0):
                raise ValueError("soft labels y must be non-negative.")
            if np.any(np.asarray(Y.sum(axis=1)).ravel() <= 0):
                raise ValueError(
                    "every row of soft labels y needs a positive entry (a row sums to 0)."
                )
            V = Y.shape[1]
            if self.vocabulary is None:
                classes = np.arange(V)
            else:
                classes = self._vocabulary_array()
                if classes.shape[0] != V:
                    raise ValueError(
                        f"soft labels have {V} columns but the vocabulary has "
                        f"{classes.shape[0]} tokens."
                    )
            if V < 2:
                raise ValueError("soft labels need at least 2 columns (tokens).")
            return classes, Y
        y_arr = y_arr.ravel() if y_arr.ndim == 2 else y_arr
        check_classification_targets(y_arr)
        if self.vocabulary is None:
            classes, idx = np.unique(y_arr, return_inverse=True)
            if classes.shape[0] < 2:
                raise ValueError(
                    "NTPDecoderClassifier needs at least 2 classes (next tokens) in y "
                    f"when vocabulary=None; got 1 class: {classes[0]!r}. Pass "
                    "vocabulary=V to name the other tokens."
                )
        else:
            classes = self._vocabulary_array()
            idx = np.searchsorted(classes, y_arr)
            idx = np.clip(idx, 0, classes.shape[0] - 1)
            bad = classes[idx] != y_arr
            if bad.any():
                raise ValueError(
                    f"labels outside the vocabulary: {np.unique(y_arr[bad])[:10]!r}."
                )
        Y = sp.csr_matrix((np.ones(n), (np.arange(n), idx.ravel())),
                          shape=(n, classes.shape[0]))
        return classes, Y

    def _vocabulary_array(self):
        if isinstance(self.vocabulary, Real) and not isinstance(self.vocabulary, bool):
            if int(self.vocabulary) != self.vocabulary:
                raise ValueError("vocabulary must be an integer number of tokens.")
            return np.arange(int(self.vocabulary))
        classes = np.unique(np.asarray(self.vocabulary))
        if classes.shape[0] < 2:
            raise ValueError("the vocabulary needs at least 2 tokens.")
        return classes

    # ----------------------------------------------------------------- fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the decoder by the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Context embeddings; identical rows are one distinct context.
        y : array-like of shape (n_samples,) or (n_samples, V)
            Next tokens, or non-negative next-token weights per row (soft
            labels, normalized per row).
        sample_weight : array-like of shape (n_samples,), default=None
            Weight of each row (for soft labels: the context's weight).

        Returns
        -------
        self
        """
        be, contexts, weights, probs = self._prepare(X, y, sample_weight)
        if self.solver == "svm":
            self._fit_svm(contexts, probs)
        else:
            self._fit_gradient(be, contexts, weights, probs)
        self._set_alignment()
        return self

    def _prepare(self, X, y, sample_weight):
        """Validate, aggregate the contexts and solve the limits (all but the solver).

        Returns ``(backend, contexts, context_weights, next_token_probs)``;
        also used by :func:`skntp.sweeps.fit_ntp_trials`.
        """
        be = backend_of(self)  # an unavailable device fails before any work
        X = validate_data(self, X, reset=True, dtype=np.float64,
                          ensure_min_samples=1)
        n = X.shape[0]
        if not sp.issparse(y):
            y = np.asarray(y)
        if sp.issparse(y) or (y.ndim == 2 and y.shape[1] > 1):
            y_checked = y
        else:
            from sklearn.utils import column_or_1d

            y_checked = column_or_1d(y, warn=True)
        if not sp.issparse(y_checked) and np.shape(y_checked)[0] != n:
            raise ValueError(
                f"X has {n} samples but y has {np.shape(y_checked)[0]}."
            )
        classes, Y = self._targets(y_checked, n)
        sample_weight = _check_sample_weight(sample_weight, X, dtype=np.float64,
                                             ensure_non_negative=True)
        contexts, weights, probs, _ = aggregate_contexts(X, Y, sample_weight)
        self.classes_ = classes
        self.contexts_ = contexts
        self.context_weights_ = weights
        m, V = probs.shape
        self.next_token_probs_ = probs if m * V > _DENSE_PROBS_MAX else probs.toarray()
        p = probs.data
        row = np.repeat(np.arange(m), np.diff(probs.indptr))
        self.entropy_ = float(-np.sum(weights[row] * p * np.log(p)))
        self._fit_limits(contexts, probs)
        return be, contexts, weights, probs

    def _set_alignment(self):
        d = self.coef_ - self.finite_component_ if self.finite_component_ is not None \
            else self.coef_
        self.alignment_ = (alignment(d, self.mm_direction_)
                           if self.mm_direction_ is not None else float("nan"))

    def _fit_limits(self, contexts, probs):
        self.svm_result_ = None
        if not self.compute_limits and self.solver != "svm":
            self.finite_component_ = None
            self.mm_direction_ = None
            self.mm_margin_ = float("nan")
            self.is_ntp_compatible_ = None
            self.is_ntp_separable_ = None
            self._projector = None
            return
        equations = log_odds_problem(contexts, probs)
        self.finite_component_, residual = solve_min_norm(equations)
        self.is_ntp_compatible_ = bool(residual <= 1e-8)
        self._projector = SubspaceProjector.from_problem(equations)
        progress = limit_progress(self, "NTP-SVM")
        try:
            # (astype copies: a comparison would sort probs' indices in place)
            _, res = solve_ntp_svm(contexts, probs.astype(bool), method=self.svm_method,
                                   callback=progress, **backend_kwargs(self))
        except ProgramTooLargeError as exc:
            if self.solver == "svm":
                raise
            self.is_ntp_separable_ = None
            self.mm_direction_ = None
            self.mm_margin_ = float("nan")
            warnings.warn(
                f"{exc} Gradient solvers still fit, without the max-margin direction: "
                "mm_direction_ is None and the history has no alignment.",
                UserWarning,
                stacklevel=3,
            )
            return
        except NotSeparableError as exc:
            if self.solver == "svm":
                raise
            self.is_ntp_separable_ = False
            self.mm_direction_ = None
            self.mm_margin_ = 0.0
            warnings.warn(
                f"{exc} Gradient solvers still fit (the loss has a finite minimizer "
                "on the non-separable part), but there is no max-margin direction: "
                "mm_direction_ is None.",
                UserWarning,
                stacklevel=3,
            )
            return
        finally:
            close_progress(progress)
        nrm = float(np.linalg.norm(res.primal))
        self.svm_result_ = res
        self.is_ntp_separable_ = True
        if nrm == 0:  # every context has full support: F-perp direction is moot
            self.mm_direction_ = np.zeros_like(res.primal)
            self.mm_margin_ = float("inf")
        else:
            self.mm_direction_ = res.primal / nrm
            self.mm_margin_ = 1.0 / nrm

    def _svm_radius(self, contexts, probs):
        if self.svm_radius != "auto":
            return float(self.svm_radius)
        m, V = probs.shape
        if probs.nnz == m * V or not np.isfinite(self.mm_margin_):
            return 0.0
        R = 0.0
        for start, stop in row_chunks(m, V):  # one chunk of logits at a time
            support = probs[start:stop].toarray() > 0
            L_star = contexts[start:stop] @ self.finite_component_.T
            L_dir = contexts[start:stop] @ self.mm_direction_.T
            lo_in = np.where(support, L_star, np.inf).min(axis=1)
            hi_out = np.where(~support, L_star, -np.inf).max(axis=1)
            gap_dir = (np.where(support, L_dir, np.inf).min(axis=1)
                       - np.where(~support, L_dir, -np.inf).max(axis=1))
            need = (_SATURATION_NATS + hi_out - lo_in) / gap_dir
            need = need[np.isfinite(need)]
            if need.size:
                R = max(R, float(need.max()))
        return R

    def _fit_svm(self, contexts, probs):
        R = self._svm_radius(contexts, probs)
        self.svm_radius_ = R
        self.coef_ = self.finite_component_ + R * self.mm_direction_
        self.n_iter_ = self.svm_result_.n_iter if self.svm_result_ is not None else 0
        loss = ntp_cross_entropy(self.coef_, contexts, self.context_weights_, probs)
        self.history_ = {
            "iteration": np.array([0.0]),
            "loss": np.array([loss]),
            "excess_loss": np.array([loss - self.entropy_]),
            "norm": np.array([np.linalg.norm(self.coef_)]),
            "alignment": np.array([alignment(self.coef_, self.mm_direction_)]),
            "alignment_corrected": np.array([1.0 if R > 0 else 0.0]),
            "finite_distance": np.array([0.0]),
        }

    def _init_coef(self, V, d):
        """LeCun-normal ``W_0 ~ N(0, 1/d)`` of shape (V, d) from ``random_state``."""
        rng = check_random_state(self.random_state)
        return rng.standard_normal((V, d)) / np.sqrt(d)

    def _fit_gradient(self, be, contexts, weights, probs):
        W0 = self._init_coef(probs.shape[1], contexts.shape[1])
        objective = CrossEntropy(be, contexts, weights, probs)
        metrics = history_metrics(
            be, 0, self.mm_direction_, self.finite_component_, self._projector
        )
        result = train(self, objective, (W0,), be, metrics)
        self.coef_ = np.asarray(to_numpy(result.params[0]), dtype=np.float64)
        self.n_iter_ = result.n_iter
        hist = result.history
        hist["excess_loss"] = hist["loss"] - self.entropy_
        self.history_ = hist
        if (self.is_ntp_separable_ is False and not result.converged
                and self.solver != "regpath" and hist["grad_norm"][-1] > 1e-8):
            warnings.warn(
                f"solver={self.solver!r} stopped after max_iter={self.max_iter} "
                f"iterations with gradient norm {hist['grad_norm'][-1]:.3g} > "
                f"tol={self.tol}; the data are not NTP-separable, so the loss has a "
                "finite minimizer that was not reached. Increase max_iter.",
                ConvergenceWarning,
                stacklevel=3,
            )

    # ------------------------------------------------------------- predict
    def _logits(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_.T

    def decision_function(self, X):
        """Logits ``W h`` of shape (n, V); for two tokens the logit difference (n,)."""
        L = self._logits(X)
        return L[:, 1] - L[:, 0] if L.shape[1] == 2 else L

    def predict_log_proba(self, X):
        """Log-softmax of the logits (max-shifted: finite at any norm)."""
        return log_softmax(np, self._logits(X), axis=1)

    def predict_proba(self, X):
        """Next-token probabilities ``softmax(W h)`` of shape (n, V)."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X):
        """Most likely next token for each context."""
        logits = self._logits(X)
        return self.classes_[np.argmax(logits, axis=1)]

    def score(self, X, y, sample_weight=None):
        """Accuracy of :meth:`predict` (scikit-learn's default).

        For grid searches over NTP data, where several next tokens are
        correct, score the log-loss instead with
        ``scoring=skntp.metrics.make_vocabulary_log_loss_scorer()`` and fit
        with ``vocabulary=`` (the whole vocabulary): scikit-learn's
        ``"neg_log_loss"`` infers the tokens from each test fold, which
        rarely holds them all, and gives NaN.
        """
        return super().score(X, y, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags
