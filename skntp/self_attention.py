"""1-layer self-attention for next-token prediction (Li et al., self-attention NTP paper)."""

from __future__ import annotations

import dataclasses
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils import Bunch, column_or_1d
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, check_random_state

from ._backend import get_backend, scaled_norm, softmax
from ._base import (
    BACKEND_CONSTRAINTS,
    TRAINING_CONSTRAINTS,
    ImplicitBiasEstimator,
    Limits,
    Training,
    backend_kwargs,
    cosine,
    descent_parameters_doc,
    other_limit_directions,
    saturation_radius,
)
from ._warnings import user_stacklevel
from .graphs import (
    PaddedSequences,
    check_token_labels,
    check_token_sequences,
    cyclic_subspace_basis,
    is_acyclic,
    label_scc_positions,
    strongly_connected_components,
    token_priority_graphs,
)
from .losses.self_attention import (
    SelfAttentionRisk,
    embedding_table,
    head_matrix,
    realizable_samples,
    saturation_gaps,
    stacked_risk,
)
from .metrics import SubspaceProjector, history_metrics
from .svm import norm_value, solve_max_margin
from .svm._graph import cyclic_correction, graph_svm_problem, pseudo_limits

__all__ = ["NTPAttentionClassifier"]

_ORTHOGONALITY_TOL = 1e-6
#: public loss names -> the model's
_LOSS = {"log_loss": "log", "ce": "ce", "squared": "squared"}


@descent_parameters_doc
class NTPAttentionClassifier(ClassifierMixin, ImplicitBiasEstimator):
    """Next-token prediction with 1-layer self-attention over token embeddings.

    The model (eq. (1)) predicts ``y_hat = C X^T softmax(X W x_bar)`` for a
    sequence of token embeddings ``X`` (rows of the fixed embedding table
    ``E``) with last token ``x_bar``; only the combined key-query weight
    ``W`` (``d x d``) is trained, the head ``C`` is fixed.  Fitted
    *implicitly* (GD, normalized GD, Adam or the regularization path, Algo-GD
    and Algo-RP) or *explicitly* by the limit of Theorems 2-3:
    ``W ~ W^cyc + R W^mm/||W^mm||`` with ``W^mm`` the (Graph-SVM) solution on
    the token-priority graphs of the data and ``W^cyc`` the cyclic
    correction (Def. 3).

    Input sequences are token ids: a 2-D integer array ``(n, T)`` or a list
    of 1-D integer sequences of different lengths.  Float arrays are accepted
    only if every value is an integer (they are cast without rounding);
    non-integer values raise a ``ValueError``.

    Parameters
    ----------
    embeddings : array-like of shape (K, d), default=None
        The embedding table ``E``.  ``None`` draws ``K`` rows uniformly on
        the unit sphere of ``R^d`` with ``random_state`` (App. D), with
        ``K = n_tokens`` and ``d = embedding_dim``.
    n_tokens : int, default=None
        Vocabulary size ``K`` when ``embeddings`` is None (default: the
        largest id seen in ``X`` or ``y``, plus one).
    embedding_dim : int, default=None
        ``d`` when ``embeddings`` is None (default: ``K``).
    head : {"identity", "embeddings"} or array-like of shape (K, d), default="identity"
        The head ``C``.  ``"identity"``: ``C = (E E^T)^{-1} E`` so that
        ``C E^T = I_K`` (Assumption 4; needs ``K <= d`` and independent
        embeddings); then ``y_hat_k`` is the attention mass on the tokens
        equal to ``k``.  ``"embeddings"``: the tied head ``C = E``, a general
        head satisfying Assumption 3 for distinct unit-norm embeddings
        (Sec. 6).  An array is used as given (a warning is raised if it
        violates Assumption 3, ``argmax_k c_y^T e_k = y``).
    loss : {"log_loss", "ce", "squared"}, default="log_loss"
        ``"log_loss"``: ``-log(c_y^T f(X))``, the attention mass on the label under
        Assumption 4, convex in ``W`` (Lemma 3, Sec. 5); ``"ce"``: the
        cross-entropy of ``y_hat`` (Fig. 6); ``"squared"``:
        ``(1 - c_y^T f(X))^2`` (Fig. 5).
    solver : str, default="gd"
        One of "gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror",
        "regpath", "svm".
        ``"gd"``: Algo-GD; ``"ngd"``: normalized GD (App. D, the paper's
        figures); ``"adam"``; ``"regpath"``: Algo-RP over ``path_radii``;
        ``"svm"``: ``coef_ = finite_component_ + svm_radius * mm_direction_``.
        ``"signgd"``: sign descent; ``"nsd"``: normalized steepest descent in
        ``descent_norm``; ``"mirror"``, ``"nmirror"``: lp mirror descent with
        ``p = mirror_p``, plain or normalized.  Each fit records the norm that
        theory names for its solver's limit, ``limit_norm_``.
    lr : float, default=0.5
        Step size (the paper's figures use normalized GD with 0.01 or 0.1).
    %(descent_parameters)s
    max_iter : int, default=1000
        Iterations (inner iterations per radius for ``"regpath"``).
    tol : float, default=0.0
        Stop when the gradient norm falls to ``tol``.  With ``W^mm != 0``
        the iterates diverge in norm by design, so ``max_iter`` is the horizon.
    init : None, "zeros", "random" or array-like of shape (d, d), default=None
        The start ``W(0)``: ``None`` or "zeros" is ``0``; "random" draws
        ``N(0, 1/d^2)`` entrywise from ``random_state``; an array is used as given.
    svm_radius : "auto" or float, default="auto"
        ``R`` for ``solver="svm"``.  ``"auto"``: the smallest ``R`` for which,
        in every sequence, every token outside the label's SCC scores at least
        20 nats below every token of that SCC (so the attention it gets is at
        most ``T e^{-20}``).
    path_radii : array-like, default=None
        Radii of the regularization path (``geomspace(0.5, 200, 24)`` by default).
    compute_limits : bool, default=True
        Solve (Graph-SVM) and the cyclic correction during ``fit``.
    selection_threshold : float, default=1e-3
        Attention probability above which a token counts as *selected* when
        building pseudo token-priority graphs (:meth:`pseudo_graphs`, Sec. 6).
    svm_method : str, default="auto"
        Method of the max-margin core for the program in the limit norm
        (``limit_norm_``); the Frobenius program beside it always uses ``"auto"``.
    record_weights : bool, default=False
        Also keep the weights ``W`` at every record of the history, in
        ``trajectory_`` (``record_every`` sets the stride; refused before the
        run when they would take more than a quarter of the available memory).
    %(record_every)s
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the embeddings (when drawn) and the ``"random"`` start.
    verbose : int, default=0
        ``> 0`` shows a progress bar of the gradient solvers on stderr.

    Attributes
    ----------
    coef_ : ndarray of shape (d, d)
        The attention weight ``W``.
    embeddings_ : ndarray of shape (K, d)
    head_ : ndarray of shape (K, d)
        ``C``.
    classes_ : ndarray of shape (K,)
        The token ids ``0..K-1``.
    graphs_ : dict of int to networkx.DiGraph
        Token-priority graph ``G^(k)`` per last token ``k`` (edges label -> token).
    sccs_ : dict of int to list of set
        Strongly connected components of every graph.
    is_acyclic_ : bool
        Every SCC is a singleton (Def. 2).
    realizable_ : ndarray of shape (n_samples,), bool
        The label occurs in its sequence (Assumption 2).  With the identity
        head the other samples carry no gradient and are left out of the
        loss and the graphs.
    mm_direction_ : ndarray of shape (d, d) or None
        ``W^mm / ||W^mm||`` (zero when no graph has an ``i => j`` pair; None
        when (Graph-SVM) is infeasible or ``compute_limits=False``).  In a norm
        that is not strictly convex (``limit_norm_`` max, l1 or spectral) one
        minimizer of possibly several.
    mm_margin_ : float
        ``1 / ||W^mm||`` (in ``limit_norm_``).
    limit_norm_ : str or tuple
        The norm of the max-margin limit that theory names for the solver
        (:func:`skntp.diagnostics.limit_norm`); ``mm_direction_`` is the Graph-SVM
        solution in it (the same constraints in every norm).  For a norm other
        than Frobenius this is the package's conjecture, measured, not a theorem
        of the paper.
    limit_directions_ : dict
        Norm -> unit-Frobenius Graph-SVM direction, for ``limit_norm_`` and
        ``"fro"``; ``history_["alignment_fro"]`` is the cosine with the latter.
    finite_component_ : ndarray of shape (d, d) or None
        ``W^cyc`` (Def. 3), in ``S_cyc`` and orthogonal to ``W^mm`` (Lemma 2).
    cyclic_basis_ : ndarray of shape (d * d, r)
        Orthonormal basis of ``S_cyc`` (``r = 0`` for acyclic data).
    alignment_ : float
        Cosine of ``coef_ - finite_component_`` with ``mm_direction_``.
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``grad_norm``, ``norm``, ``alignment``
        (cosine of ``W - W^cyc`` with ``W^mm``, so its last value is
        ``alignment_``), ``alignment_uncorrected`` (``<W, W^mm>/(||W||
        ||W^mm||)``, the paper's correlation), ``finite_distance``
        (``||Pi_Scyc(W) - W^cyc||``), ``time``.
    trajectory_ : dict of ndarray
        With ``record_weights=True``: ``iteration`` and ``weights`` (shape
        ``(n_records, d, d)``), the recorded iterates ``W(t)``.
    n_iter_ : int
    svm_result_ : MaxMarginResult or None
    svm_radius_ : float
        ``R`` used by ``solver="svm"``.

    Raises
    ------
    FloatingPointError
        From ``fit``, when the square of the largest entry of the embeddings
        lies outside ``[1e-290, 1e290]`` (:data:`skntp._backend.SCORE_MAGNITUDES`;
        embeddings of magnitude 1e-150 or 1e150): the scores ``e_x^T W e_k``
        multiply two embeddings, and ``W^mm`` and ``W^cyc`` (about their
        inverse) would leave float64.  Inside that range the predictions do not
        depend on the units of the embeddings.

    See Also
    --------
    skntp.metrics.make_vocabulary_log_loss_scorer : The log-loss scorer for
        ``GridSearchCV`` (``scoring="neg_log_loss"`` gives NaN when a test
        fold lacks some of the ``K`` tokens).
    skntp.datasets.TokenEncoder : Words to token ids.

    Examples
    --------
    >>> from skntp.self_attention import NTPAttentionClassifier
    >>> from skntp.datasets import make_token_priority_data
    >>> X, y, E = make_token_priority_data(8, 8, 4, 6, acyclic=True, random_state=0)
    >>> clf = NTPAttentionClassifier(embeddings=E, solver="ngd", lr=0.01,
    ...                              max_iter=4000).fit(X, y)
    >>> clf.is_acyclic_, bool(clf.alignment_ > 0.99)
    (True, True)
    """

    _parameter_constraints = {
        "embeddings": ["array-like", None],
        "n_tokens": [Interval(Integral, 1, None, closed="left"), None],
        "embedding_dim": [Interval(Integral, 1, None, closed="left"), None],
        "head": [StrOptions({"identity", "embeddings"}), "array-like"],
        "loss": [StrOptions(set(_LOSS))],
        "init": [None, StrOptions({"zeros", "random"}), "array-like"],
        "selection_threshold": [Interval(Real, 0, 1, closed="neither")],
        "record_weights": ["boolean"],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(self, embeddings=None, *, n_tokens=None, embedding_dim=None,
                 head="identity", loss="log_loss", solver="gd", lr=0.5, power_t=0.0,
                 eps=1e-8, descent_norm="fro", mirror_p=2.0, max_iter=1000,
                 tol=0.0, init=None, svm_radius="auto", path_radii=None, compute_limits=True,
                 selection_threshold=1e-3, svm_method="auto", record_every=10,
                 record_weights=False, backend="numpy", device=None, dtype="float64",
                 random_state=None, verbose=0):
        self.embeddings = embeddings
        self.n_tokens = n_tokens
        self.embedding_dim = embedding_dim
        self.head = head
        self.loss = loss
        self.solver = solver
        self.lr = lr
        self.power_t = power_t
        self.eps = eps
        self.descent_norm = descent_norm
        self.mirror_p = mirror_p
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.svm_radius = svm_radius
        self.path_radii = path_radii
        self.compute_limits = compute_limits
        self.selection_threshold = selection_threshold
        self.svm_method = svm_method
        self.record_every = record_every
        self.record_weights = record_weights
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y, sample_weight=None):
        """Fit the attention weight ``W`` by the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n_samples, T) or list of 1-D sequences
            Token ids (sequences may have different lengths).
        y : array-like of shape (n_samples,)
            Next-token ids.
        sample_weight : array-like of shape (n_samples,), default=None
            Weights of the samples in the risk (ERM).

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight)

    # ------------------------------------------------------------- the model
    def _prepare(self, X, y, sample_weight):
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None.")
        ids, mask, last = check_token_sequences(X)
        y = check_token_labels(column_or_1d(y, warn=True), ids.shape[0])
        sw = _check_sample_weight(sample_weight, np.empty((ids.shape[0], 1)),
                                  dtype=np.float64, ensure_non_negative=True)
        rng = check_random_state(self.random_state)
        E = embedding_table(self.embeddings, self.n_tokens, self.embedding_dim,
                            np.concatenate([ids[mask], y]), rng)
        K = E.shape[0]
        if ids[mask].max() >= K or y.max() >= K:
            bad = int(max(ids[mask].max(), y.max()))
            raise ValueError(f"token ids out of range: found id {bad} but the vocabulary has "
                             f"{K} tokens (ids 0..{K - 1}).")
        C, gamma, identity = head_matrix(self.head, E)
        realizable = realizable_samples(ids, mask, y, identity)
        used = (sw > 0) & (realizable if identity else True)
        seqs = (ids[used], mask[used], last[used], y[used])
        graphs = token_priority_graphs(PaddedSequences(*seqs[:3]), seqs[3])
        sccs = strongly_connected_components(graphs)
        w = sw[used] / max(sw[used].sum(), np.finfo(float).tiny)
        return {"E": E, "C": C, "gamma": gamma, "identity": identity, "seqs": seqs,
                "weights": w, "realizable": realizable, "graphs": graphs, "sccs": sccs,
                "rng": rng, "loss": _LOSS[self.loss]}

    def _risk(self, data, be):
        return SelfAttentionRisk(be, data["E"], data["gamma"], *data["seqs"], loss=data["loss"],
                                 sample_weight=data["weights"])

    def _explicit_limits(self, data):
        E, seqs, sccs = data["E"], data["seqs"], data["sccs"]
        d = E.shape[1]
        wc, info = cyclic_correction(E, PaddedSequences(*seqs[:3]), seqs[3], sccs,
                                     gamma=data["gamma"], loss=data["loss"],
                                     sample_weight=data["weights"], return_info=True)
        rows = cyclic_subspace_basis(E, sccs)
        problem = graph_svm_problem(E, data["graphs"], sccs)
        directions, results, _ = self._limits_in_norms(
            "Graph-SVM", lambda norm, cb: solve_max_margin(
                dataclasses.replace(problem, norm=norm), method=self._svm_method(norm),
                callback=cb,
                **backend_kwargs(self)),
            "mm_direction_ is None.")
        limit = self._limit_norm()
        res, direction = results[limit], directions[limit]
        norm = 0.0 if res is None else norm_value(res.primal, limit)
        if direction is not None and norm > 0 and abs(cosine(wc, direction)) > _ORTHOGONALITY_TOL:
            warnings.warn(
                f"W^cyc and W^mm are not orthogonal (cosine {cosine(wc, direction):.2e}), "
                "against Lemma 2: a limit was solved inaccurately.", RuntimeWarning,
                stacklevel=user_stacklevel())
        return Limits(direction, wc, SubspaceProjector(rows if rows.shape[0] else None, (d, d)),
                      svm_result_=res, cyclic_basis_=info["basis"],
                      limit_directions_=directions,
                      mm_margin_=(float("nan") if res is None else
                                  1.0 / norm if norm > 0 else float("inf")))

    def _limit_parameters(self, data, limits):
        R = float(self.svm_radius) if self.svm_radius != "auto" else 0.0
        if self.svm_radius == "auto" and np.any(limits.direction):
            ids, mask, last, y = data["seqs"]
            inside = label_scc_positions(data["sccs"], ids, mask, last, y, data["E"].shape[0])
            base, gaps = saturation_gaps(self._risk(data, get_backend()), inside, mask,
                                         limits.finite, limits.direction)
            R = saturation_radius(gaps, base)
        self.svm_radius_ = R
        return (limits.finite + R * limits.direction,)

    def _training(self, data, limits, be):
        d = data["E"].shape[1]
        W0 = self._initial(self.init, (d, d), data["rng"], default="zeros", divisor=d)
        metrics = history_metrics(be, 0, limits.direction, limits.finite, limits.projector,
                                  other_directions=other_limit_directions(limits))
        return Training(self._risk(data, be), (W0,), metrics)

    @classmethod
    def _batched_objective(cls, datas, be):
        """The trials' risks stacked (:func:`~skntp.losses.self_attention.stacked_risk`)."""
        return stacked_risk(be, [(data["E"], data["gamma"], data["seqs"], data["weights"],
                                  data["loss"]) for data in datas])

    def _fitted(self, data, limits, params, result):
        self.embeddings_, self.head_ = data["E"], data["C"]
        self.classes_ = np.arange(data["E"].shape[0])
        self._gamma, self._identity = data["gamma"], data["identity"]
        self.realizable_ = data["realizable"]
        self.graphs_, self.sccs_ = data["graphs"], data["sccs"]
        self.is_acyclic_ = is_acyclic(self.graphs_, self.sccs_)
        self._set_limit_attributes(limits, params[0], ("cyclic_basis_",))
        if result is not None:
            self.n_iter_, self.history_ = result.n_iter, result.history
            return
        loss, (grad,) = self._risk(data, get_backend())((self.coef_,))
        proj = limits.projector.project(self.coef_)
        self.n_iter_ = self.svm_result_.n_iter
        self.history_ = self._svm_history(
            loss, params, grad_norm=scaled_norm(grad), alignment=self.alignment_,
            alignment_uncorrected=cosine(self.coef_, limits.direction),
            finite_distance=scaled_norm(proj - limits.finite))

    # -------------------------------------------------------------- predict
    def _check_X(self, X):
        check_is_fitted(self)
        return check_token_sequences(X, self.embeddings_.shape[0])

    def attention_weights(self, X):
        """Softmax attention ``S(X W x_bar)`` of every sequence.

        Returns
        -------
        s : ndarray of shape (n_samples, T_max)
            Zero at padding positions (list input of different lengths).
        """
        return self._attention(*self._check_X(X))

    def _outputs(self, X):
        ids, mask, last = self._check_X(X)
        s = self._attention(ids, mask, last)
        # y_hat = C X^T s = sum_t s_t Gamma[:, x_t]
        return np.einsum("nt,ntk->nk", s, self._gamma.T[ids])

    def predict_proba(self, X):
        """Next-token probabilities over the ``K`` tokens.

        With ``head="identity"`` these are the model outputs ``y_hat``
        themselves: the attention mass on each token (eq. (1) under
        Assumption 4).  With another head, ``softmax(y_hat)`` (the
        probabilities of the cross-entropy loss).

        Returns
        -------
        proba : ndarray of shape (n_samples, K)
        """
        out = self._outputs(X)
        if self._identity:
            return np.clip(out, 0.0, None) / np.clip(out, 0.0, None).sum(axis=1, keepdims=True)
        return softmax(np, out, axis=1)

    def decision_function(self, X):
        """Model outputs ``y_hat = C X^T softmax(X W x_bar)`` of shape (n_samples, K)."""
        return self._outputs(X)

    def predict(self, X):
        """Most likely next token id (``argmax_k y_hat_k``)."""
        out = self._outputs(X)
        return self.classes_[np.argmax(out, axis=1)]

    # ------------------------------------------------------ local analysis
    def pseudo_graphs(self, X, y, *, threshold=None):
        """Pseudo token-priority graphs of the fitted attention (Sec. 6, App. D).

        Positions whose attention at ``coef_`` exceeds ``threshold`` are
        *selected*; in ``G^(k)`` every selected token points to every token
        of its sequence.  The pseudo (Graph-SVM) direction and cyclic
        correction are the local limits that GD with a general head or the
        squared loss follows (Figs. 5-6).  The pseudo ``W^cyc`` minimizes the
        model's loss (with the true labels) on the pseudo cyclic sub-dataset
        (the tokens in the selected tokens' SCC) inside the pseudo ``S_cyc``,
        from zero; with a general head this need not be a global or finite
        minimizer (the paper defers its rigorous definition).

        Parameters
        ----------
        X : array-like of shape (n_samples, T) or list of sequences
        y : array-like of shape (n_samples,)
        threshold : float, optional
            Defaults to ``selection_threshold``.

        Returns
        -------
        Bunch
            ``graphs``, ``sccs``, ``is_acyclic``, ``selected`` ((n, T) bool),
            ``mm_direction`` (unit, or zero), ``finite_component`` (pseudo
            ``W^cyc``), ``alignment`` (cosine of ``coef_`` with
            ``mm_direction``), ``finite_distance``
            (``||Pi(coef_) - W^cyc||`` on the pseudo ``S_cyc``).
        """
        ids, mask, last = self._check_X(X)
        y = check_token_labels(y, ids.shape[0], self.embeddings_.shape[0])
        thr = self.selection_threshold if threshold is None else float(threshold)
        if not 0.0 < thr < 1.0:
            raise ValueError(f"threshold must lie in (0, 1) (an attention probability), "
                             f"got {threshold!r}.")
        s = self._attention(ids, mask, last)
        selected = (s > thr) & mask
        selected[np.arange(ids.shape[0]), np.argmax(np.where(mask, s, -1.0), axis=1)] = True
        out = pseudo_limits(self.embeddings_, PaddedSequences(ids, mask, last), y, selected,
                            gamma=self._gamma, loss=_LOSS[self.loss], method=self.svm_method,
                            **backend_kwargs(self))
        proj = out.pop("projector").project(self.coef_)
        return Bunch(**out, selected=selected, alignment=cosine(self.coef_, out.mm_direction),
                     finite_distance=scaled_norm(proj - out.finite_component))

    def _attention(self, ids, mask, last):
        risk = SelfAttentionRisk(get_backend(), self.embeddings_, self._gamma, ids, mask,
                                 last, np.zeros(ids.shape[0], np.int64), loss="squared")
        return risk.attention(self.coef_)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = True
        tags.input_tags.categorical = True
        tags.input_tags.positive_only = True  # token ids are non-negative
        return tags
