"""Next-token prediction with trained word and context embeddings (NTP-UFM).

Zhao, Behnia, Vakilian, Thrampoulidis, "Implicit Geometry of Next-token
Prediction: From Language Sparsity Patterns to Model Representations" (2024).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import (
    check_is_fitted,
    check_random_state,
    validate_data,
)

from ._backend import get_backend, log_softmax, to_numpy
from ._base import (
    BACKEND_CONSTRAINTS,
    TRAINING_CONSTRAINTS,
    ImplicitBiasEstimator,
    Limits,
    Training,
    descent_parameters_doc,
    saturation_radius,
    unit,
)
from .losses.decoder import next_token_data
from .losses.embeddings import FactoredCrossEntropy
from .metrics import _balanced_factors, _gram_cosine
from .svm import logit_finite_component, ntp_logit_svm, support_proxy

__all__ = ["NTPEmbeddingClassifier"]


def _support_gaps(L, inside):
    """Per context (column of ``L``, ``V x m``): smallest in-support minus largest other
    logit (``+inf`` when the support is the whole vocabulary)."""
    return (np.where(inside, L, np.inf).min(axis=0) - np.where(inside, -np.inf, L).max(axis=0))


@descent_parameters_doc
class NTPEmbeddingClassifier(ClassifierMixin, ImplicitBiasEstimator):
    """NTP with unconstrained features: word embeddings ``W`` and context embeddings ``H``.

    Each distinct context (a distinct row of ``X``, used only as its identity)
    gets a free embedding ``h_j`` (a column of ``H``, ``d x m``); the logits are
    ``L = W H`` (``V x m``) and both factors are trained on the NTP
    cross-entropy, with the weight decay ``(weight_decay / 2)(||W||^2 +
    ||H||^2)``.  As the loss approaches its entropy bound the logits split
    into the finite in-support part ``L_in`` (``finite_component_``) and a
    part growing along ``L_mm``, the minimum-nuclear-norm logits with margin 1
    (``mm_direction_``; :func:`skntp.svm.ntp_logit_svm`), whose balanced
    factors predict the word and context Gram matrices (Zhao et al. 2024).

    Parameters
    ----------
    solver : {"gd", "ngd", "adam", "svm"}, default="ngd"
        The descent of :func:`skntp._optim.minimize` on ``(W, H)``, or the
        explicit limit: ``L = L_in + svm_radius L_mm / ||L_mm||_F`` in its
        balanced factors.
    lr : float, default=0.1
    %(descent_parameters)s
    n_components : int or None, default=None
        ``d``; ``None`` for ``min(m, V)`` (every rank representable).  A
        smaller ``d`` constrains the rank (the theory assumes ``d`` large
        enough); ``solver="svm"`` then keeps the ``d`` leading balanced factors.
    weight_decay : float, default=0.0
    max_iter : int, default=1000
    tol : float, default=0.0
    vocabulary : None, int or array-like, default=None
        As for :class:`~skntp.NTPDecoderClassifier`.
    svm_radius : "auto" or float, default="auto"
        ``R`` of ``solver="svm"`` ("auto": every out-of-support logit 20 nats
        below the support).
    path_radii : None
        Must be None: this estimator has no regularization-path solver (the
        parameter exists for the package's shared validation).
    compute_limits : bool, default=True
    svm_method : str, default="auto"
    record_every : int, default=10
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the start ``N(0, 1/d)`` of both factors.
    verbose : int, default=0

    Attributes
    ----------
    coef_ : ndarray of shape (V, m)
        The logits ``W H`` (tokens by contexts), each column centered (softmax does
        not see a constant added to a context's logits; ``L_mm`` and ``L_in`` are
        centered too).
    word_embeddings_ : ndarray of shape (V, d)
    context_embeddings_ : ndarray of shape (m, d)
        ``h_j``, one row per distinct context (the order of ``contexts_``).
    contexts_ : ndarray of shape (m, n_features)
        The distinct rows of ``X``; :meth:`predict` knows only these.
    classes_, context_weights_, next_token_probs_, entropy_ :
        As for :class:`~skntp.NTPDecoderClassifier` (``next_token_probs_`` dense).
    mm_direction_ : ndarray of shape (V, m) or None
        ``L_mm / ||L_mm||_F``.
    finite_component_ : ndarray of shape (V, m) or None
        ``L_in`` (:func:`skntp.svm.logit_finite_component`).
    mm_margin_ : float
        ``1 / ||L_mm||_*``.
    mm_word_gram_, mm_context_gram_ : ndarray of shape (V, V), (m, m) or None
        The predicted geometries: ``U S U^T`` and ``V S V^T`` of ``L_mm = U S V^T``
        (unit Frobenius norm).
    support_proxy_ : ndarray of shape (V, m)
        The centered support matrix (:func:`skntp.svm.support_proxy`).
    svm_result_ : MaxMarginResult or None
    alignment_ : float
        Cosine of ``W H - L_in`` with ``mm_direction_``.
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``excess_loss`` (gap to ``entropy_``, weight
        decay included), ``grad_norm``, ``norm``, ``alignment`` (of the centered
        ``W H`` minus ``L_in`` with ``L_mm``), ``alignment_uncorrected`` (of the
        centered ``W H``),
        ``word_gram_alignment`` and ``context_gram_alignment`` (cosines of
        ``W W^T`` and ``H^T H`` with the predicted Grams), ``time``.
    n_iter_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from skntp import NTPEmbeddingClassifier
    >>> X = np.repeat(np.arange(6.0), 3)[:, None]           # 6 contexts
    >>> y = np.array([0, 1, 1, 2, 2, 2, 0, 3, 3, 1, 1, 4, 4, 4, 0, 2, 3, 4])
    >>> clf = NTPEmbeddingClassifier("gd", lr=1.0, weight_decay=1e-3, max_iter=4000,
    ...                              random_state=0).fit(X, y)
    >>> bool(clf.alignment_ > 0.98)
    True
    """

    _parameter_constraints = {
        "vocabulary": [None, Interval(Real, 2, None, closed="left"), "array-like"],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
        "solver": [StrOptions({"gd", "ngd", "adam", "svm"})],
        "n_components": [None, Interval(Integral, 1, None, closed="left")],
        "weight_decay": [Interval(Real, 0, None, closed="left")],
        "path_radii": [None],  # no regularization path here: any value is refused
        "descent_norm": [StrOptions({"fro"})],  # no steepest descent in another norm
    }

    def __init__(self, solver="ngd", *, lr=0.1, power_t=0.0, eps=1e-8, descent_norm="fro",
                 mirror_p=2.0, n_components=None, weight_decay=0.0, max_iter=1000, tol=0.0,
                 vocabulary=None, svm_radius="auto", path_radii=None, compute_limits=True,
                 svm_method="auto", record_every=10, backend="numpy", device=None,
                 dtype="float64", random_state=None, verbose=0):
        self.solver = solver
        self.lr = lr
        self.power_t = power_t
        self.eps = eps
        self.descent_norm = descent_norm
        self.mirror_p = mirror_p
        self.n_components = n_components
        self.weight_decay = weight_decay
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

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit ``W`` and ``H`` on the distinct rows of ``X`` and their next tokens.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Context identities: identical rows are one context.
        y : array-like of shape (n_samples,) or (n_samples, V)
            Next tokens, or soft labels.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight)

    def _parameter_norm(self):
        return "nuclear"  # min over W H = L of (||W||^2 + ||H||^2) / 2 is ||L||_*

    def _prepare(self, X, y, sample_weight):
        data = next_token_data(self, X, y, sample_weight)
        data["probs"] = data["probs"].toarray()
        m, V = data["probs"].shape
        data["d"] = min(m, V) if self.n_components is None else int(self.n_components)
        return data

    def _explicit_limits(self, data):
        probs = data["probs"]
        res, _ = self._solve_limit(
            "logit NTP-SVM", lambda cb: ntp_logit_svm(probs > 0, method=self.svm_method,
                                                      callback=cb),
            "mm_direction_ is None.")
        if res is None:  # too large for this machine's memory (warned)
            return Limits(None, logit_finite_component(probs), None, mm_margin_=float("nan"))
        direction = unit(res.primal)[0]
        Wmm, Hmm = _balanced_factors(res.primal)
        return Limits(direction, logit_finite_component(probs), None, svm_result_=res,
                      mm_margin_=1.0 / res.objective if res.objective > 0 else float("inf"),
                      grams=(Wmm, Hmm.T), limit_directions_={"nuclear": direction})

    def _limit_parameters(self, data, limits):
        inside = data["probs"].T > 0
        if self.svm_radius == "auto":
            R = saturation_radius(_support_gaps(limits.direction, inside),
                                  _support_gaps(limits.finite, inside))
        else:
            R = float(self.svm_radius)
        self.svm_radius_ = R
        W, H = _balanced_factors(limits.finite + R * limits.direction)
        return self._padded(W, data["d"]), self._padded(H.T, data["d"]).T

    @staticmethod
    def _padded(A, d):
        """The first ``d`` columns of ``A``, zero-padded to ``d``."""
        return np.pad(A[:, :d], ((0, 0), (0, max(0, d - A.shape[1]))))

    def _training(self, data, limits, be):
        V, m, d = data["probs"].shape[1], data["probs"].shape[0], data["d"]
        rng = check_random_state(self.random_state)
        params0 = (rng.standard_normal((V, d)) / np.sqrt(d),
                   rng.standard_normal((d, m)) / np.sqrt(d))
        objective = FactoredCrossEntropy(be, data["weights"], data["probs"],
                                         self.weight_decay, n_components=d)
        return Training(objective, params0, self._metrics(be, limits))

    @staticmethod
    def _metrics(be, limits):
        """The history's records: norms, alignment of the logits, Gram alignments."""
        xp = be.xp
        known = limits.direction is not None
        if known:
            D, F = be.asarray(limits.direction), be.asarray(limits.finite)
            Wmm, Hmm = (be.asarray(g) for g in limits.attributes["grams"])

        def cos(a, b):
            den = float(to_numpy(xp.sqrt(xp.sum(a * a) * xp.sum(b * b))))
            return float(to_numpy(xp.sum(a * b))) / den if den > 0 else 0.0

        def metrics(params):
            W, H = params
            out = {"norm": float(to_numpy(xp.sqrt(xp.sum(W * W) + xp.sum(H * H))))}
            if known:
                L = W @ H
                L = L - xp.mean(L, axis=0, keepdims=True)  # softmax-invariant shift removed
                out["alignment"] = cos(L - F, D)
                out["alignment_uncorrected"] = cos(L, D)
                out["word_gram_alignment"] = _gram_cosine(*(np.asarray(to_numpy(a))
                                                            for a in (W, Wmm)))
                out["context_gram_alignment"] = _gram_cosine(*(np.asarray(to_numpy(a))
                                                               for a in (H.T, Hmm)))
            return out

        return metrics

    def _fitted(self, data, limits, params, result):
        W, H = params
        self.classes_, self.contexts_ = data["classes"], data["contexts"]
        self.context_weights_, self.next_token_probs_ = data["weights"], data["probs"]
        self.entropy_ = data["entropy"]
        L = W @ H
        self._set_limit_attributes(limits, L - L.mean(axis=0, keepdims=True))
        self.word_embeddings_, self.context_embeddings_ = W, H.T
        self.support_proxy_ = support_proxy(data["probs"])
        grams = limits.attributes.get("grams")
        self.mm_word_gram_, self.mm_context_gram_ = (
            (None, None) if grams is None else (unit(g @ g.T)[0] for g in grams))
        if result is None:  # solver="svm"
            loss = float(FactoredCrossEntropy(_numpy(), data["weights"], data["probs"],
                                              self.weight_decay)(params)[0])
            self.n_iter_ = self.svm_result_.n_iter
            self.history_ = self._svm_history(
                loss, params, excess_loss=loss - self.entropy_, alignment=self.alignment_,
                **{k: v for k, v in self._metrics(_numpy(), limits)(params).items()
                   if k not in ("norm", "alignment")})
            return
        self.n_iter_ = result.n_iter
        self.history_ = dict(result.history, excess_loss=result.history["loss"] - self.entropy_)

    # ------------------------------------------------------------- predict
    def _logits(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64) + 0.0
        keys = np.ascontiguousarray(self.contexts_).view(
            np.dtype((np.void, self.contexts_.dtype.itemsize * self.contexts_.shape[1])))[:, 0]
        order = np.argsort(keys)
        asked = np.ascontiguousarray(X).view(keys.dtype)[:, 0]
        at = np.minimum(np.searchsorted(keys[order], asked), keys.size - 1)
        unseen = keys[order][at] != asked
        if unseen.any():
            raise ValueError(
                f"{int(unseen.sum())} row(s) of X are contexts not seen in fit (first: row "
                f"{int(np.flatnonzero(unseen)[0])}): the model has one free embedding per "
                "training context and none for a new one.")
        return self.coef_.T[order[at]]

    def decision_function(self, X):
        """Logits of shape (n, V) of the (seen) contexts; for two tokens, their difference."""
        L = self._logits(X)
        return L[:, 1] - L[:, 0] if L.shape[1] == 2 else L

    def predict_log_proba(self, X):
        """Log-softmax of the logits."""
        return log_softmax(np, self._logits(X), axis=1)

    def predict_proba(self, X):
        """Next-token probabilities of shape (n, V)."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X):
        """Most likely next token of each (seen) context."""
        logits = self._logits(X)
        return self.classes_[np.argmax(logits, axis=1)]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        return tags


def _numpy():
    return get_backend("numpy")

