"""Next-token prediction with trained word and context embeddings (NTP-UFM).

Zhao, Behnia, Vakilian, Thrampoulidis, "Implicit Geometry of Next-token
Prediction: From Language Sparsity Patterns to Model Representations" (2024).
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils._param_validation import (
    Interval,
    InvalidParameterError,
    Options,
    StrOptions,
    validate_parameter_constraints,
)
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


class NTPEmbeddingClassifier(ClassifierMixin, ImplicitBiasEstimator):
    """NTP with unconstrained features: word embeddings ``W`` and context embeddings ``H``.

    Each distinct context (a distinct row of ``X``, used only as its identity)
    gets a free embedding ``h_j`` (a column of ``H``, ``d x m``); the logits are
    ``L = W H`` (``V x m``) and both factors are trained on the NTP
    cross-entropy, with the weight decay ``(weight_decay / 2)(||W||_F^2 +
    ||H||_F^2)``.  As the loss approaches its entropy bound the logits split
    into the finite in-support part ``L_in`` (``finite_component_``) and a
    part growing along ``L_mm``, the minimum-nuclear-norm logits with margin 1
    (``mm_direction_``; :func:`skntp.svm.ntp_logit_svm`), whose balanced
    factors predict the word and context Gram matrices (Zhao, Behnia,
    Vakilian, Thrampoulidis 2024).  User guide: *NTP with trained embeddings
    (NTP-UFM)*.

    Parameters
    ----------
    solver : {"gd", "ngd", "adam", "svm"}, default="ngd"
        ``"gd"``: constant-step gradient descent on ``(W, H)``; ``"ngd"``:
        normalized GD (each factor moves by ``lr`` along its unit gradient);
        ``"adam"``: Adam; ``"svm"``: no descent, the explicit limit
        ``W H = L_in + svm_radius_ L_mm / ||L_mm||_F`` in its balanced factors.
        The defaults differ from :class:`~skntp.NTPDecoderClassifier`'s (``"gd"``,
        ``lr=0.5``) on purpose: each free context embedding ``h_j`` receives only
        its own context's gradient, weighted by ``pi_j ~ 1/m``, so plain GD with a
        fixed step slows down as the number of contexts ``m`` grows, while
        normalized GD's step does not depend on the gradient's size (the decoder's
        ``W`` is shared by all contexts). Measured (``V = 20``, random supports of
        density 0.15, soft labels, 1,000 steps, loss above the entropy bound): at
        ``m = 10`` GD ``lr=0.5`` 2.7e-3 and NGD ``lr=0.1`` 3.0e-3; at ``m = 200`` GD
        0.195 and NGD 1.1e-3; at ``m = 800`` GD 1.10 and NGD 1.1e-3. The price of
        the constant normalized step: on soft labels NGD's loss stays of order 1e-3
        above the bound (Adam, ``lr=0.01``: 4.9e-5 at ``m = 200``); with one next
        token per context it saturates the softmax of a small instance in float64
        (loss exactly 0) after 600 to 750 steps, where the descent stops with a
        ``ConvergenceWarning`` (8 random patterns, ``m`` and ``V`` from 5 to 12).
    lr : float, default=0.1
        The step size (``> 0``).
    power_t : float, default=0.0
        Decay of the step: ``lr / k**power_t`` at iteration ``k`` (0: constant).
    eps : float, default=1e-8
        Adam's constant added to the root of the second moment (only
        ``solver="adam"``).  With ``eps = 0``, ``limit_norm_`` reads ``"max"``
        (the rule of :func:`skntp.diagnostics.limit_norm` for Adam without it),
        but ``mm_direction_`` is still ``L_mm``: no max-norm limit of the
        factored model is computed.
    descent_norm : "fro", default="fro"
        Only ``"fro"`` is accepted: this estimator has no normalized steepest
        descent (``solver="nsd"``), the one solver this parameter configures.
        It exists so that every estimator takes the same parameters.
    mirror_p : 2.0, default=2.0
        Only 2 is accepted: this estimator has no mirror descent
        (``solver="mirror"``, ``"nmirror"``), the solvers it configures.
    n_components : int or None, default=None
        ``d``, the dimension of the embeddings; ``None`` for ``min(m, V)``
        (every rank representable, the theory's setting).  A smaller ``d``
        constrains the rank of ``L``; ``solver="svm"`` then keeps the ``d``
        leading balanced factors, so ``W H`` is a truncation of the limit.
    weight_decay : float, default=0.0
        ``lambda >= 0`` of the decay ``(lambda / 2)(||W||_F^2 + ||H||_F^2)``.
        With ``lambda > 0`` the loss has a finite minimizer, the point of the
        regularization path whose direction tends to ``L_mm`` as ``lambda -> 0``
        (the theorem of Zhao et al.); with ``lambda = 0`` the logits diverge
        along ``L_mm``.  ``solver="svm"`` ignores it.
    max_iter : int, default=1000
        Iterations of the descent.
    tol : float, default=0.0
        Stop when the norm of the gradient (of both factors) falls to ``tol``.
        Without weight decay the logits diverge by design, so ``max_iter`` is
        the horizon and reaching it raises no ``ConvergenceWarning``.
    vocabulary : None, int or array-like, default=None
        The token set ``V``: ``None`` for the labels seen (or the columns of
        soft labels), an int ``V`` for tokens ``0..V-1``, or an array of
        tokens.  Tokens never seen as a next token are out of support everywhere.
    svm_radius : "auto" or float, default="auto"
        ``R`` of ``solver="svm"``: ``W H = L_in + R L_mm / ||L_mm||_F``.
        ``"auto"``: the smallest ``R`` that puts every out-of-support logit at
        least 20 nats below its context's support (every out-of-support
        probability below ``exp(-20)``).  Only used by ``solver="svm"``.
    path_radii : None, default=None
        Only ``None`` is accepted: this estimator has no ``solver="regpath"``,
        the one solver this parameter configures.  Its regularization path is
        the weight decay: one fit per ``weight_decay``.
    compute_limits : bool, default=True
        Solve the logit-space NTP-SVM during ``fit`` (needed for
        ``solver="svm"``, ``mm_direction_`` and the alignment records of
        ``history_``); ``L_in`` is computed either way.
    svm_method : str, default="auto"
        The method of :func:`skntp.svm.ntp_logit_svm`, one that minimizes the
        nuclear norm: ``"auto"`` (``"svt-admm"``, then ``"scs"``, then the
        max-margin core, until an answer is certified), ``"svt-admm"``,
        ``"scs"``, ``"nuclear-ipm"`` or ``"cvxpy"``; any other raises a
        ``ValueError`` naming these.
    record_every : int, default=10
        Record the history every that many iterations (and always the first
        and the last).
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
        Torch device (``"cpu"``, ``"cuda"``); only with ``backend="torch"``.
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the start ``N(0, 1/d)`` of both factors.
    verbose : int, default=0
        Progress of the limit solve and of the descent on stderr.

    Attributes
    ----------
    coef_ : ndarray of shape (V, m)
        The logits ``W H`` (tokens by contexts), each column centered (softmax does
        not see a constant added to a context's logits; ``L_mm`` and ``L_in`` are
        centered too).
    word_embeddings_ : ndarray of shape (V, d)
        ``W``, one row per token.
    context_embeddings_ : ndarray of shape (m, d)
        ``h_j``, one row per distinct context (the order of ``contexts_``).
    contexts_ : ndarray of shape (m, n_features)
        The distinct rows of ``X``; :meth:`predict` knows only these.
    classes_ : ndarray of shape (V,)
        The tokens.
    context_weights_ : ndarray of shape (m,)
        Empirical context probabilities ``pi_j``.
    next_token_probs_ : ndarray of shape (m, V)
        ``p_j``, dense.
    entropy_ : float
        The entropy lower bound ``H`` of the cross-entropy.
    mm_direction_ : ndarray of shape (V, m) or None
        ``L_mm / ||L_mm||_F`` (``None`` when the program was not solved:
        ``compute_limits=False``, or too large for this machine).
    finite_component_ : ndarray of shape (V, m) or None
        ``L_in`` (:func:`skntp.svm.logit_finite_component`); ``None`` with
        ``compute_limits=False``.
    mm_margin_ : float
        ``1 / ||L_mm||_*`` (``inf`` when every support is the whole vocabulary,
        nan when not computed).
    mm_word_gram_, mm_context_gram_ : ndarray of shape (V, V), (m, m) or None
        The predicted geometries: ``U S U^T`` and ``V S V^T`` of ``L_mm = U S V^T``
        (unit Frobenius norm).
    support_proxy_ : ndarray of shape (V, m)
        The centered support matrix (:func:`skntp.svm.support_proxy`).
    limit_norm_ : str
        ``"nuclear"``: ``min`` over ``W H = L`` of ``(||W||_F^2 + ||H||_F^2) / 2``
        is ``||L||_*`` (``"max"`` for Adam with ``eps = 0``, see ``eps``).
    limit_directions_ : dict
        ``{"nuclear": mm_direction_}`` when it was solved.
    svm_result_ : MaxMarginResult or None
        The certified solve of the logit-space NTP-SVM.
    svm_radius_ : float
        ``R`` of ``solver="svm"``.
    alignment_ : float
        Cosine of the centered ``W H`` minus ``L_in`` with ``mm_direction_``
        (nan when not computed).
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``excess_loss`` (gap to ``entropy_``, weight
        decay included), ``grad_norm``, ``norm`` (of ``(W, H)``), ``alignment``
        (of the centered ``W H`` minus ``L_in`` with ``L_mm``),
        ``alignment_uncorrected`` (of the centered ``W H``),
        ``word_gram_alignment`` and ``context_gram_alignment`` (cosines of
        ``W W^T`` and ``H^T H`` with the predicted Grams), ``time``.
    n_iter_ : int
        Gradient steps of the descent; with ``solver="svm"``, the iterations of
        the method that solved the logit-space NTP-SVM.
    n_features_in_ : int

    See Also
    --------
    skntp.metrics.logit_geometry : Any model's logits or embeddings against ``L_mm``.
    skntp.svm.ntp_logit_svm : The logit-space NTP-SVM on a support pattern.

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
        # the parameters of solvers this estimator does not run: their default only
        "descent_norm": [StrOptions({"fro"})],
        "mirror_p": [Options(Real, {2.0})],
        "path_radii": [None],
    }

    #: Why a parameter of another estimator's solver takes only its default here.
    _NOT_APPLICABLE = {
        "descent_norm": "NTPEmbeddingClassifier has no solver='nsd', the normalized "
                        "steepest descent this norm is for.",
        "mirror_p": "NTPEmbeddingClassifier has no solver='mirror' or 'nmirror', the "
                    "mirror descents this p is for.",
        "path_radii": "NTPEmbeddingClassifier has no solver='regpath'; its regularization "
                      "path is weight_decay, one fit per value.",
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

    def _validate_params(self):
        """scikit-learn's validation; a parameter of a solver this estimator does not
        run is refused with the reason."""
        for name, reason in self._NOT_APPLICABLE.items():
            try:
                validate_parameter_constraints(
                    {name: self._parameter_constraints[name]}, {name: getattr(self, name)},
                    caller_name=type(self).__name__)
            except InvalidParameterError as exc:
                raise InvalidParameterError(f"{exc} {reason}") from None
        super()._validate_params()

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

