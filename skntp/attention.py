"""Attention as token selection (Tarzanagh et al., "Max-Margin Token Selection
in Attention Mechanism"): :class:`AttentionSelector` (Sec. 2) and
:class:`JointAttentionSVM` (Sec. 3).

The model is ``f(X) = v^T X^T softmax(X W^T p)`` (eq. (5)), trained on
``l(Y f(X))`` (ERM).  With the head ``v`` fixed and the query ``p`` (or, by
Lemma 1, the key-query matrix ``W``) trained, gradient descent drives
``||p|| -> infinity`` and the softmax to select one token per input; the
direction converges to a max-margin separator of the selected tokens,
``p^mm(alpha)`` of (ATT-SVM): the globally optimal one ``p^mm*`` (GMM) along
the regularization path (Thm. 1) and for GD with one input (Thm. 2), a
locally optimal one (LMM, Def. 2) for GD started in its cone (Thm. 3).
With ``v`` and ``p`` trained jointly, ``v -> v^mm`` (the head SVM on the
selected tokens) and ``p -> p^relax`` of eq. (10) (Thms. 5-6).

The key-query model of "Transformers as Support Vector Machines" (one query per
input, ``W`` or ``Q K^T``, value heads) is :class:`skntp.KeyQuerySelector`
(:mod:`skntp.key_query`); it shares with :class:`AttentionSelector` the selection,
the head, the diagnosis (:func:`diagnose_selection`) and the base
``_TokenSelector`` written here.
"""

from __future__ import annotations

import math
import warnings
from numbers import Integral

import numpy as np
from scipy.special import expit
from sklearn.base import ClassifierMixin, TransformerMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, check_random_state

from ._backend import scaled_norm, to_numpy
from ._base import (
    BACKEND_CONSTRAINTS,
    SATURATION_NATS,
    TRAINING_CONSTRAINTS,
    ImplicitBiasEstimator,
    Limits,
    Training,
    backend_of,
    cosine,
    default_radii,
    descent_parameters_doc,
    finite_radius,
    norm_name,
    saturation_radius,
    unit,
)
from ._optim import SCALE_FREE
from ._sequences import (
    binary_labels,
    check_attention_input,
    checked_parameter,
    key_query_matrix,
)
from ._warnings import user_stacklevel
from .losses.attention import (
    AttentionObjective,
    QueryProblem,
    attention_decision,
    attention_features,
    attention_loss_grad,
    attention_weights,
)
from .metrics import alignment
from .svm import (
    NotSeparableError,
    ProgramTooLargeError,
    UndecidedError,
    att_svm,
    att_svm_prime,
    head_svm,
    joint_svm,
    min_score_gap,
    norm_value,
    relaxed_att_svm,
    support_vectors,
    svm_neighbors,
)

__all__ = ["SATURATION_THRESHOLD", "AttentionSelector", "JointAttentionSVM",
           "diagnose_selection"]

#: Softmax saturation threshold of App. E (Fig. 9): mean selected probability.
SATURATION_THRESHOLD = 1.0 - 1e-5
#: public loss names -> the model's
_LOSS = {"log_loss": "logistic", "exponential": "exponential", "correlation": "correlation"}


def labelled_inputs(estimator, X, y, sample_weight):
    """Validated tokens, mask, labels ``Y`` in {-1, +1}, classes, weights and ``W``: what
    every attention estimator fits from (``estimator.classes``, ``estimator.key_query``)."""
    Xp, mask = check_attention_input(estimator, X, reset=True)
    n, T, d = Xp.shape
    classes, Y = binary_labels(y, n, estimator.classes, type(estimator).__name__)
    sw = _check_sample_weight(sample_weight, np.empty((n, 1)), dtype=np.float64,
                              ensure_non_negative=True)
    if not sw.sum() > 0:
        raise ValueError("sample_weight is zero for every input; nothing to fit.")
    return {"X": Xp, "mask": mask, "Y": Y, "sw": sw, "classes": classes,
            "W": key_query_matrix(estimator.key_query, d)}


def optimal_tokens(scores, mask):
    """The optimal tokens ``argmax_t gamma_it`` of each input, ties included.

    Scores within ``1e-12`` of the input's top, *relative to the largest score of
    the data* (the scores have the data's units), tie: scaling the tokens by any
    factor changes no token's status.  All-zero scores tie everywhere.
    """
    sc = np.where(mask, scores, -np.inf)
    top = sc.max(axis=1, keepdims=True)
    real = np.abs(scores[mask])
    scale = float(real.max()) if real.size else 0.0
    return mask & (sc >= top - 1e-12 * scale)


def _gmm_program(data, method, callback):
    """``p^mm*`` of the optimal tokens: (ATT-SVM), or (ATT-SVM') of App. D with ties."""
    optimal, keys, mask = data["optimal"], data["keys"], data["mask"]
    ties = np.flatnonzero(optimal.sum(axis=1) > 1)
    if ties.size == 0:
        return att_svm(keys, np.argmax(data["scores"], axis=1), mask=mask, method=method,
                       callback=callback)
    count = math.prod(int(c) for c in optimal.sum(axis=1))
    p, _, n_best = att_svm_prime(keys, optimal, mask=mask, method=method,
                                 max_combinations=data["enumeration"])
    msg = (f"inputs {ties[:10].tolist()} have several optimal tokens (tied scores), so "
           "(ATT-SVM) is replaced by the non-convex (ATT-SVM') of App. D, solved exactly by "
           f"enumerating the {count} choices of one optimal token per input")
    if n_best > 1:
        msg += (f"; {n_best} choices reach the minimal norm, so the GMM direction is not "
                "unique and gmm_direction_ is one of them")
    warnings.warn(msg + ".", UserWarning, stacklevel=user_stacklevel())
    return p


def _head_vector(head, X, mask, Y):
    """The fixed head ``v``: given, or the unit difference of the class means of the
    mean-pooled tokens (``e_1`` if that is zero)."""
    d = X.shape[2]
    if head is not None:
        return checked_parameter(head, "head", (d,), f"({d},) (the token dimension)",
                                 ravel=True)
    pooled = (X * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    v, nv = unit(pooled[Y > 0].mean(0) - pooled[Y < 0].mean(0)) if (Y > 0).any() and (
        Y < 0).any() else (np.zeros(d), 0.0)
    if nv == 0 or not np.isfinite(nv):
        v = np.zeros(d)
        v[0] = 1.0
    return v


def _fixed_query(fixed, k, rng, owner="train='W'"):
    """The fixed query ``u`` of ``owner`` (``train="W"``, or a key-query model without
    per-input queries): ``1/sqrt(k)`` everywhere, random, or given."""
    if fixed is None:
        return np.full(k, 1.0 / np.sqrt(k))
    if isinstance(fixed, str):
        if fixed == "random":
            return rng.standard_normal(k) / np.sqrt(k)
        raise ValueError(f"{owner} needs a non-zero fixed query: it cannot be 'zeros'.")
    u = checked_parameter(fixed, "fixed_query", (k,), f"({k},)", ravel=True)
    if not np.any(u):
        raise ValueError(f"{owner} needs a non-zero fixed query u.")
    return u


def _selection(keys, query, mask):
    """The selected tokens and the saturation, without the max-margin diagnosis."""
    s = attention_weights(np, keys, query, mask)
    selected = np.argmax(s, axis=1)
    return {"selected": selected, "saturation": float(s[np.arange(len(s)), selected].mean())}


def _joint_directions(estimator, data, selected, head=None, relaxed=None, att=None,
                      support=None, norm="fro"):
    """The limit directions of the joint model for the tokens ``selected`` (Sec. 3).

    ``norm``: the norm of both programs (the head SVM and the relaxed ATT-SVM;
    margins ``1 / ||.||`` in it, directions of unit Frobenius norm).

    Returns the fitted attributes (``selected_tokens_``, ``head_mm_direction_``,
    ``head_mm_margin_``, ``support_``, ``support_vectors_``, ``att_svm_direction_``,
    ``mm_direction_``, ``mm_margin_``) and the gaps of ``svm_radius="auto"``:
    ``label_gaps`` (the head's margin) and ``attention_gaps`` (the logit gaps of
    the unit ``p^relax`` that it separates, up to roundoff).
    """
    X, K, mask, Y = data["X"], data["K"], data["mask"], data["Y"]
    out = {"selected_tokens_": None, "head_mm_direction_": None, "head_mm_margin_": 0.0,
           "support_": np.zeros(0, dtype=np.int64), "support_vectors_": np.zeros((0, X.shape[2])),
           "att_svm_direction_": None, "mm_direction_": None, "mm_margin_": float("nan"),
           "label_gaps": np.zeros(0), "attention_gaps": np.zeros(0)}
    if selected is None:
        return out
    rows = np.arange(X.shape[0])
    out["selected_tokens_"] = np.asarray(selected, dtype=np.int64)
    tokens = X[rows, selected]
    kw = {"method": estimator.svm_method, "norm": norm}
    if head is None:
        head, _ = estimator._solve_limit(
            "head SVM", lambda cb: head_svm(tokens, Y, callback=cb, **kw),
            "The selected tokens (largest attention) admit no head max-margin direction: "
            "head_mm_direction_, mm_direction_ and att_svm_direction_ are None.",
            required=False)
        if head is None:
            return out
    out["head_mm_direction_"] = unit(head)[0]
    # v != 0: the head SVM's constraints y_i v^T x_i >= 1 (n >= 1)
    out["head_mm_margin_"] = 1.0 / norm_value(head, norm)
    out["label_gaps"] = np.array([out["head_mm_margin_"]])
    if support is None:
        support = support_vectors(tokens, Y, head)
    out["support_"] = np.flatnonzero(support)
    out["support_vectors_"] = tokens[support]
    if att is None:
        att, _ = estimator._solve_limit(
            "ATT-SVM of the selected tokens",
            lambda cb: relaxed_att_svm(K, selected, mask=mask, callback=cb, **kw),
            "att_svm_direction_ is None.", required=False)
    if att is not None and att.any():  # zero: no constraint (one token per input)
        out["att_svm_direction_"] = unit(att)[0]
    if relaxed is None and att is not None and support.all():
        relaxed = att
    elif relaxed is None:
        relaxed, _ = estimator._solve_limit(
            "relaxed ATT-SVM of the support vectors",
            lambda cb: relaxed_att_svm(K, selected, support, mask=mask, callback=cb, **kw),
            "mm_direction_ is None.", required=False)
    if relaxed is not None and relaxed.any():
        p = unit(relaxed)[0]
        out["mm_direction_"], out["mm_margin_"] = p, 1.0 / norm_value(relaxed, norm)
        gaps = (K[rows, selected][:, None, :] - K) @ p
        other = mask.copy()
        other[rows, selected] = False
        gaps = gaps[other]
        # roundoff of a unit p against the keys: relative to the keys' magnitude
        out["attention_gaps"] = gaps[gaps > 1e-9 * float(np.abs(K[mask]).max(initial=0.0))]
    return out


def diagnose_selection(keys, scores, query, *, mask=None, optimal=None, method="auto",
                       threshold=SATURATION_THRESHOLD, mm=None):
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
    mm : ndarray of shape (k,), "infeasible", "undecided" or None
        A max-margin solution of the selected tokens computed elsewhere (e.g.
        in another norm: the nuclear-norm limit of factored attention, its
        SVM-neighbors being its tight constraints); ``"infeasible"`` when there
        is none (certified), ``"undecided"`` when its solve certified neither a
        solution nor infeasibility.  ``None`` solves (ATT-SVM).

    Returns
    -------
    dict
        ``selected`` (``alpha_i = argmax_t S(K_i p)_t``), ``saturation``
        (``mean_i S(K_i p)_{alpha_i}``), ``saturated``, ``mm`` (``p^mm(alpha)``
        of (ATT-SVM) with margin 1, or ``None`` if infeasible),
        ``neighbors`` (Def. 2, bool (n, T) or ``None``), ``min_score_gap``
        (``min_{i, t in T_i} gamma_{i alpha_i} - gamma_it``, Fig. 9(b)),
        ``locally_optimal`` (Def. 2; ``None`` where (ATT-SVM) is undecided),
        ``selects_optimal`` (every ``alpha_i`` is an optimal token),
        ``correlation`` (cosine of ``p`` with ``p^mm(alpha)``) and
        ``convergence``: ``"not-saturated"``, ``"global"`` (saturated on the
        optimal tokens, a GMM), ``"local"`` (saturated on locally optimal
        tokens, an LMM), ``"other"``, or ``"undecided"`` (saturated, but no
        certified answer of (ATT-SVM): neither a solution, whose tight rows
        Def. 2 needs, nor infeasibility; an uncertified point is never used).
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
        optimal = optimal_tokens(scores, mask)
    out = {"selected": selected, "saturation": saturation,
           "saturated": saturation >= threshold, "mm": None, "neighbors": None,
           "min_score_gap": float("nan"), "locally_optimal": False,
           "selects_optimal": bool(optimal[np.arange(n), selected].all()),
           "correlation": float("nan"), "mm_result": None}
    undecided = isinstance(mm, str) and mm == "undecided"
    if isinstance(mm, str):
        mm = None
    elif mm is None:
        try:
            mm, out["mm_result"] = att_svm(keys, selected, mask=mask, method=method,
                                           return_result=True)
        except NotSeparableError:
            mm = None
        except UndecidedError:
            mm, undecided = None, True
        if out["mm_result"] is not None and out["mm_result"].status != "optimal":
            mm, undecided = None, True  # (the dispatcher warned: not certified)
    if undecided:
        out["locally_optimal"] = None
    if mm is not None:
        nb = svm_neighbors(keys, selected, mm, mask=mask)
        gap = min_score_gap(scores, selected, nb)
        out.update(mm=mm, neighbors=nb, min_score_gap=gap, locally_optimal=gap > 0,
                   correlation=alignment(query, mm))
    if not out["saturated"]:
        out["convergence"] = "not-saturated"
    elif undecided:
        out["convergence"] = "undecided"
    elif mm is None:
        out["convergence"] = "other"
    elif out["selects_optimal"] and (out["locally_optimal"] or optimal.sum(1).max() > 1):
        out["convergence"] = "global"
    elif out["locally_optimal"]:
        out["convergence"] = "local"
    else:
        out["convergence"] = "other"
    return out


class _TokenSelector(ClassifierMixin, TransformerMixin, ImplicitBiasEstimator):
    """What :class:`AttentionSelector` and :class:`~skntp.KeyQuerySelector` share.

    Both fix the head and train the attention on the risk (ERM); both report the
    tokens the attention selects, the max-margin directions of that selection and
    the diagnosis of Fig. 9 (:func:`diagnose_selection`).  A subclass gives the
    model: ``_prepare`` (through :meth:`_labelled`), the GMM program in a norm
    other than Frobenius (``_gmm_in_norm``), ``_limit_parameters``, ``_training``,
    ``_trained_limits``, ``_fitted`` (through :meth:`_publish`), ``_forward`` and
    ``decision_function``.
    """

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
        return self._fit(X, y, sample_weight)

    # ------------------------------------------------------------- the model
    def _labelled(self, X, y, sample_weight):
        """The data every selector starts from: tokens, mask, labels, weights, ``W``."""
        data = labelled_inputs(self, X, y, sample_weight)
        data.update(rng=check_random_state(self.random_state), init=self.init,
                    enumeration=self.max_enumeration)
        return data

    @staticmethod
    def _scored(data, values):
        """Add the token scores ``gamma_it = Y_i values_it`` (Def. 1) and the optimal tokens."""
        scores = np.where(data["mask"], data["Y"][:, None] * values, -np.inf)
        data["scores"] = scores
        data["optimal"] = optimal_tokens(scores, data["mask"])
        return data

    def _explicit_limits(self, data):
        own = self._limit_norm()
        program = lambda cb: _gmm_program(data, self._svm_method("fro"), cb)  # noqa: E731
        if own != "fro":
            def program(cb):
                if (data["optimal"].sum(axis=1) > 1).any():
                    raise ValueError(
                        "some inputs have several optimal tokens (tied scores); the GMM "
                        f"in the {norm_name(own)} norm is only computed without ties "
                        "(ATT-SVM' of App. D is enumerated in the Frobenius norm).")
                return self._gmm_in_norm(data, np.argmax(data["scores"], axis=1), own, cb)
        # (ValueError: too many tied choices to enumerate, or ties in another norm)
        p, _ = self._solve_limit("ATT-SVM (GMM)", program, "gmm_direction_ is None.",
                                 failures=(ValueError, ProgramTooLargeError, UndecidedError))
        direction, norm = (None, 0.0) if p is None else unit(p)
        if p is not None and norm == 0:
            if self.solver == "svm":
                raise NotSeparableError("solver='svm': p^mm* is zero (every input has only "
                                        "optimal tokens); there is no direction.")
            direction = None
        return Limits(direction, gmm=p if direction is not None else None)

    def _limit_point(self, data, limits):
        """``R p^mm*`` of ``solver="svm"`` (``R = svm_radius_``, "auto": ``20 + log T``
        nats of margin)."""
        T = int(data["mask"].sum(axis=1).max())  # tokens attended (not a query row)
        R = (float(self.svm_radius) if self.svm_radius != "auto" else finite_radius(
            (SATURATION_NATS + math.log(max(T, 1))) * unit(limits.attributes["gmm"])[1],
            "the margin-1 solution's norm is beyond it"))
        self.svm_radius_ = R
        return R * limits.direction

    def _diagnosed(self, data, q, mm=None):
        """:func:`diagnose_selection` of the effective query ``q`` (the selection only
        without ``compute_limits``)."""
        keys, mask = data["keys"], data["mask"]
        if not (self.compute_limits or self.solver == "svm"):
            return _selection(keys, q, mask)
        return diagnose_selection(keys, np.where(mask, data["scores"], 0.0), q, mask=mask,
                                  optimal=data["optimal"], method=self._svm_method("fro"),
                                  mm=mm)

    @staticmethod
    def _metrics(xp, problem, gmm, **extra):
        """The history's metrics of the effective query of ``problem``."""

        def metrics(params):
            q = problem.effective(params)
            nq = scaled_norm(q)
            s = attention_weights(xp, problem.keys, q, problem.mask)
            row = {"norm": nq, "saturation": float(xp.mean(xp.max(s, axis=1))), "query": q}
            row.update({k: getattr(problem, k) for k in extra})
            if gmm is not None:  # (q / nq: q may have the data's inverse units)
                row["gmm_alignment"] = float(xp.sum((q / nq) * gmm)) if nq > 0 else 0.0
            return row

        return metrics

    def _publish(self, data, limits, q, result, *, keys, query, finite=0.0, shape=None):
        """The fitted attributes of the selection of the effective query ``q``.

        ``keys``, ``query``: what the risk of ``solver="svm"`` is evaluated on;
        ``finite``: the finite part subtracted before the alignments; ``shape``:
        the shape of the trained matrix (``None``: a vector query).
        """
        mask, scores, rep = data["mask"], data["scores"], limits.attributes["selection"]
        self.classes_, self.head_ = data["classes"], data["v"]
        self.token_scores_ = scores
        self.optimal_tokens_ = np.argmax(scores, axis=1)
        self.optimal_sets_ = data["optimal"]
        self.mm_direction_ = limits.attributes["mm_direction"]
        self.mm_margin_ = limits.attributes["mm_margin"]
        self.limit_directions_ = limits.attributes["limit_directions"]
        self.selected_tokens_ = rep["selected"]
        self.attention_saturation_ = rep["saturation"]
        self.svm_result_ = rep.get("mm_result")
        self.svm_neighbors_ = rep.get("neighbors")
        optimal = rep.get("locally_optimal", False)
        self.is_locally_optimal_ = None if optimal is None else bool(optimal)
        self.min_score_gap_ = rep.get("min_score_gap", float("nan"))
        self.convergence_ = rep.get("convergence", "not-saturated")
        self.alignment_ = cosine(q - finite, self.mm_direction_)
        if result is None:
            self.n_iter_ = 0
            risk, _ = attention_loss_grad(np, data["X"], keys, data["Y"], data["v"], query,
                                          mask=None if mask.all() else mask,
                                          loss=_LOSS[self.loss], sample_weight=data["sw"],
                                          wrt=())
            self.history_ = self._svm_history(risk, (q,), saturation=rep["saturation"],
                                              gmm_alignment=1.0, alignment=self.alignment_)
            trajectory = q[None].copy()
        else:
            self.n_iter_ = result.n_iter
            self.history_ = dict(result.history)
            trajectory = self.history_.pop("query")
            self.history_["alignment"] = np.array([cosine(it - finite, self.mm_direction_)
                                                   for it in trajectory])
        self.limit_norm_ = self._limit_norm()
        if shape is None:
            self.trajectory_ = {"query": trajectory}
        else:
            trajectory = trajectory.reshape(-1, *shape)
            self.trajectory_ = {"key_query": trajectory}
        for norm, w in self.limit_directions_.items():
            if w is not None:
                self.history_[f"alignment_{norm_name(norm)}"] = np.array(
                    [cosine(it, w) for it in trajectory.reshape(len(trajectory), -1)])

    # ---------------------------------------------------------------- predict
    def attention_weights(self, X):
        """Softmax attention ``S(K_i p)`` of every input, shape (n, T) (0 at padding)."""
        return self._forward(X)[1]

    def transform(self, X):
        """Attention features ``X_i^T S(K_i p)``, shape (n, d) (eq. (5) before ``v``)."""
        Xp, s = self._forward(X)
        return attention_features(np, Xp, s)

    def predict(self, X):
        """``classes_[1]`` where ``f(X) > 0``, else ``classes_[0]``."""
        positive = self.decision_function(X) > 0
        return self.classes_[positive.astype(int)]

    def _is_logistic(self):
        return _LOSS[self.loss] == "logistic"

    @available_if(_is_logistic)
    def predict_proba(self, X):
        """``[1 - sigmoid(f), sigmoid(f)]`` (only for the logistic loss)."""
        f = self.decision_function(X)
        return np.column_stack([expit(-f), expit(f)])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags



@descent_parameters_doc
class AttentionSelector(_TokenSelector):
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

    The key-query model of "Transformers as Support Vector Machines" (one query
    per input, factored ``W``, value heads) is :class:`~skntp.KeyQuerySelector`.

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
        the query fixed to ``u = fixed_query``; the step on ``W`` is scaled as
        in Lemma 1 (``lr/||u||^2`` for ``"gd"``, ``lr/||u||`` for ``"ngd"``,
        radii ``/||u||`` for ``"regpath"``) so that ``W(t)^T u`` follows
        exactly the iterates of ``train="p"`` with ``key_query=None`` started
        at ``W(0)^T u``.  Directions are then computed for the effective query
        ``W^T u`` on the keys ``X`` (``W = I``).
    loss : {"log_loss", "exponential", "correlation"}, default="log_loss"
        ``l(u) = log(1 + e^{-u})`` (the logistic loss), ``e^{-u}`` or ``-u``
        (Assumption A).
    solver : str, default="ngd"
        One of "gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror",
        "regpath", "svm".
        ``"gd"``: gradient descent (3); ``"ngd"``: normalized GD (App. E);
        ``"adam"``: Adam;
        ``"regpath"``: the regularization path (2), ``argmin_{||p|| <= R}``
        over ``path_radii`` (Thm. 1), each radius solved by the shared loop
        from two starts (the previous solution and ``R`` times the GMM
        direction) keeping the lower risk, since (2) is non-convex; ``"svm"``: the explicit limit
        ``p = svm_radius * gmm_direction_`` (Thm. 1/2).
        ``"signgd"``: sign descent; ``"nsd"``: normalized steepest descent in
        ``descent_norm``; ``"mirror"``, ``"nmirror"``: lp mirror descent with
        ``p = mirror_p``, plain or normalized.  Each fit records the norm that
        theory names for its solver's limit, ``limit_norm_``.
    init : None, "zeros", "random" or array-like, default=None
        The start of the gradient solvers.  ``train="p"``: ``p(0)`` of shape
        (k,) (``None``/"zeros": ``0``; "random": ``N(0, I/k)`` from
        ``random_state``; an array, e.g. a point of the cone around an LMM
        direction, Thm. 3).  ``train="W"``: ``W(0)`` of shape (k, d)
        (``None``: ``key_query``).
    fixed_query : None, "random" or array-like of shape (k,), default=None
        ``train="W"`` only: the fixed query ``u`` (``None``: ``1/sqrt(k)`` in
        every entry; "random": a ``N(0, I/k)`` draw).
    lr : float, default=0.1
        Step size (the paper's normalized GD uses 0.1 in Fig. 1-4 and 1 in
        Fig. 9).
    %(descent_parameters)s
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
    max_enumeration : int, default=4096
        With tied optimal tokens, (ATT-SVM') of App. D is solved by
        enumerating up to this many choices of one optimal token per input.
    compute_limits : bool, default=True
        Solve (ATT-SVM) for the optimal and the selected tokens during ``fit``
        (needed for ``solver="svm"``, the directions and the diagnosis).
    classes : array-like of 2 labels, default=None
        The two labels (sorted; the first is ``Y = -1``).  ``None`` takes
        them from ``y``, which must then hold both; naming them lets ``y``
        hold one label only (e.g. a single input, Thm. 2).
    svm_method : str, default="auto"
        Method of the max-margin core for the program in the limit norm
        (``limit_norm_``); the Frobenius program beside it always uses ``"auto"``.
    %(record_every)s
    backend : {"numpy", "torch"}, default="numpy"
    device : str, default=None
    dtype : {"float64", "float32"}, default="float64"
    random_state : int, RandomState instance or None, default=None
        Seeds the random starts (``init``, ``fixed_query``).
    verbose : int, default=0

    Attributes
    ----------
    query_ : ndarray of shape (k,)
        ``p`` (trained with ``train="p"``; the fixed ``u`` with ``train="W"``).
    head_ : ndarray of shape (d,)
        ``v``.
    key_query_ : ndarray of shape (k, d)
        ``W`` (trained with ``train="W"``).
    limit_norm_ : str or tuple
        The norm of the max-margin limit that theory names for the solver
        (:func:`skntp.diagnostics.limit_norm`): ``"fro"`` for GD, normalized GD, the path, ``"svm"``
        and Adam with ``eps > 0``; ``"max"`` for sign descent and Adam with
        ``eps = 0``; ``descent_norm`` for ``"nsd"``; ``("lp", mirror_p)`` for
        mirror descent.  ``mm_direction_`` and ``gmm_direction_`` are the ATT-SVM
        solutions in this norm; the SVM-neighbors, local optimality and
        ``convergence_`` are those of the Frobenius ATT-SVM (Def. 2).
    limit_directions_ : dict
        The unit ATT-SVM solutions of the selected tokens in ``limit_norm_``
        and in the Frobenius norm, ``None`` where infeasible; ``mm_direction_``
        is the one of ``limit_norm_``.
        ``history_["alignment_<norm>"]`` is the cosine of the iterates with
        each (``alignment_l3`` for ``("lp", 3)``).
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
        they are not separable, or without constraints (one token per input).
        In a norm that is not strictly convex (``limit_norm_`` max, l1,
        nuclear or spectral) one minimizer of possibly several.
    gmm_direction_ : ndarray of shape (k,) or None
        Unit ``p^mm*`` of the optimal tokens (Def. 1; ATT-SVM' of App. D
        when some input has several); ``None`` when infeasible.
    svm_neighbors_ : ndarray of bool, shape (n, T) or None
        SVM-neighbors ``T_i`` of the selected tokens (Def. 2).
    is_locally_optimal_ : bool or None
        The selected tokens are locally optimal (Def. 2); ``None``: their ATT-SVM is undecided.
    min_score_gap_ : float
        ``min_{i, t in T_i} gamma_{i alpha_i} - gamma_it`` (Fig. 9(b)).
    convergence_ : {"global", "local", "other", "not-saturated", "undecided"}
        The bars of Fig. 9: softmax not saturated (mean selected probability ``< 1 - 1e-5``,
        App. E); saturated on the optimal tokens (GMM), on locally optimal tokens (LMM),
        otherwise, or with no certified answer of the selected tokens' ATT-SVM.
    attention_saturation_ : float
        ``mean_i max_t S(K_i p)_t``.
    mm_margin_ : float
        ``1 / ||p^mm(alpha)||`` (nan without a direction).
    alignment_ : float
        Cosine of the fitted query (``W^T u`` for ``train="W"``) with
        ``mm_direction_`` (nan when it is None).
    history_ : dict of ndarray
        ``iteration``, ``loss``, ``grad_norm``, ``norm``, ``saturation``,
        ``gmm_alignment`` (cosine with ``gmm_direction_``), ``alignment``
        (with ``mm_direction_``), ``time``; ``radius`` for the path.  Every
        entry is one value per record (``pandas.DataFrame(history_)`` works).
    trajectory_ : dict of ndarray
        ``query``, of shape (n_records, k): the recorded iterates of the
        fitted query (``W^T u`` for ``train="W"``), e.g. to draw trajectories.
    svm_result_ : MaxMarginResult or None
        The (ATT-SVM) solve of ``mm_direction_``.
    n_iter_ : int
    n_features_in_ : int
        Token dimension ``d``; for 2-D input ``(n, T)`` (read as ``n``
        sequences of ``T`` scalar tokens, the form scikit-learn's generic
        checks use) the number of columns ``T``.

    Raises
    ------
    FloatingPointError
        From ``fit``, when the units of the tokens put the limit beyond float64
        (its parameters scale as their inverse; e.g. a radius
        ``svm_radius="auto"`` that overflows).  Tokens of any magnitude from
        1e-150 to 1e150 give the same selections and predictions.

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
        "loss": [StrOptions(set(_LOSS))],
        "init": [None, StrOptions({"zeros", "random"}), "array-like"],
        "fixed_query": [None, StrOptions({"random"}), "array-like"],
        "max_enumeration": [Interval(Integral, 1, None, closed="left")],
        "classes": [None, "array-like"],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(self, head=None, key_query=None, *, train="p", loss="log_loss", solver="ngd",
                 init=None, fixed_query=None, lr=0.1, power_t=0.0, eps=1e-8,
                 descent_norm="fro", mirror_p=2.0, max_iter=1000, tol=0.0,
                 svm_radius="auto", path_radii=None, max_enumeration=4096, classes=None,
                 compute_limits=True, svm_method="auto", record_every=10, backend="numpy",
                 device=None, dtype="float64", random_state=None, verbose=0):
        self.head = head
        self.key_query = key_query
        self.train = train
        self.loss = loss
        self.solver = solver
        self.init = init
        self.fixed_query = fixed_query
        self.lr = lr
        self.power_t = power_t
        self.eps = eps
        self.descent_norm = descent_norm
        self.mirror_p = mirror_p
        self.max_iter = max_iter
        self.tol = tol
        self.svm_radius = svm_radius
        self.path_radii = path_radii
        self.max_enumeration = max_enumeration
        self.classes = classes
        self.compute_limits = compute_limits
        self.svm_method = svm_method
        self.record_every = record_every
        self.backend = backend
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose

    # ------------------------------------------------------------- the model
    def _prepare(self, X, y, sample_weight):
        if self.fixed_query is not None and self.train == "p":
            raise ValueError(f"fixed_query={self.fixed_query!r} is not used: train='p' "
                             "trains the query p itself (its start is init=). Leave "
                             "fixed_query=None.")
        data = self._labelled(X, y, sample_weight)
        Xp, W = data["X"], data["W"]
        data["v"] = _head_vector(self.head, Xp, data["mask"], data["Y"])
        data["u"] = (_fixed_query(self.fixed_query, W.shape[0], data["rng"])
                     if self.train == "W" else None)
        data["keys"] = Xp @ W.T if self.train == "p" else Xp
        return self._scored(data, Xp @ data["v"])

    def _trains_vectors(self):
        return self.train == "p"

    def _gmm_in_norm(self, data, selected, norm, callback):
        return att_svm(data["keys"], selected, mask=data["mask"], norm=norm,
                       method=self.svm_method, callback=callback)

    def _limit_parameters(self, data, limits):
        q, u = self._limit_point(data, limits), data["u"]
        return (q,) if self.train == "p" else (np.outer(u, q) / float(u @ u),)

    def _training(self, data, limits, be):
        W, u = data["W"], data["u"]
        problem = QueryProblem(be, data["X"], data["Y"], data["v"],
                               None if self.key_query is None and u is None else W, u,
                               mask=data["mask"], sample_weight=data["sw"],
                               loss=_LOSS[self.loss])
        if u is None:
            start = self._initial(data["init"], (W.shape[0],), data["rng"], default="zeros",
                                  divisor=np.sqrt(W.shape[0]))
        else:
            start = self._initial(data["init"], W.shape, data["rng"], default=W, divisor=1.0)
        gmm = None if limits.direction is None else be.asarray(limits.direction)
        radii = None
        if self.solver == "regpath":
            radii = (np.geomspace(0.1, 30.0, 16) * scaled_norm(limits.attributes["gmm"])
                     if self.path_radii is None and gmm is not None
                     else default_radii(self.path_radii)) / problem.norm_u
        # the path of the non-convex risk (2): every radius also from R p^mm* (Thm. 1),
        # each solve on the risk divided by its gradient norm
        return Training(problem.objective, (start,), self._metrics(be.xp, problem, gmm),
                        lr=problem.step(self.lr, self.solver), radii=radii,
                        starts=() if gmm is None else (problem.start(limits.direction),),
                        rescale=True)

    def _effective(self, data, params):
        """The effective query: ``p``, or ``W^T u`` (Lemma 1)."""
        return params[0] if self.train == "p" else params[0].T @ data["u"]

    def _trained_limits(self, data, limits, params):
        """The ATT-SVM of the tokens the effective query selects, in Frobenius (the
        diagnosis) and in the limit norm."""
        keys, mask = data["keys"], data["mask"]
        rep = self._diagnosed(data, self._effective(data, params))
        mm = rep.get("mm")  # zero: no constraint (one token per input), no direction
        direction, norm = (None, 0.0) if mm is None or not mm.any() else unit(mm)
        directions = {"fro": direction}
        own = self._limit_norm()
        if own != "fro":
            mm = None if direction is None else self._solve_limit(
                f"ATT-SVM of the selected tokens ({norm_name(own)} norm)",
                lambda cb: att_svm(keys, rep["selected"], mask=mask, norm=own,
                                   method=self.svm_method, callback=cb),
                "mm_direction_ is None.", required=False)[0]
            direction, norm = (None, 0.0) if mm is None else (unit(mm)[0], norm_value(mm, own))
            directions = {own: direction, "fro": directions["fro"]}
        return Limits(limits.direction, **limits.attributes, selection=rep,
                      mm_direction=direction, limit_directions=directions,
                      mm_margin=1.0 / norm if norm > 0 else float("nan"))

    def _fitted(self, data, limits, params, result):
        if self.train == "p":
            self.query_, self.key_query_ = params[0], data["W"]
        else:
            self.query_, self.key_query_ = data["u"], params[0]
        self.gmm_direction_ = limits.direction
        self._publish(data, limits, self._effective(data, params), result,
                      keys=data["X"] @ self.key_query_.T, query=self.query_)

    # ---------------------------------------------------------------- predict
    def _forward(self, X):
        Xp, mask = check_attention_input(self, X, reset=False)
        return Xp, attention_weights(np, Xp @ self.key_query_.T, self.query_,
                                     None if mask.all() else mask)

    def decision_function(self, X):
        """``f(X_i) = v^T X_i^T S(K_i p)``, shape (n,); positive means ``classes_[1]``."""
        return self.transform(X) @ self.head_


@descent_parameters_doc
class JointAttentionSVM(ClassifierMixin, TransformerMixin, ImplicitBiasEstimator):
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
    solver : str, default="ngd"
        One of "gd", "ngd", "adam", "signgd", "nsd", "mirror", "nmirror",
        "regpath", "svm".
        ``"gd"``: gradient descent with step ``lr``; ``"adam"``: Adam;
        ``"ngd"``: normalized
        GD, each block ``v``, ``p`` moved by ``lr`` along its own normalized
        gradient (as in the paper's experiments, App. E; computed from
        ``grad log L``, the same direction, so it never underflows); ``"regpath"``: the
        ridge-constrained solutions ``argmin_{||v|| <= r, ||p|| <= R} L(v, p)``
        over the increasing grid ``path_radii`` (Thms. 5-6), each warm-started
        from the last and solved on ``log L`` (same minimizers, better scaled);
        ``"svm"``: the explicit limit, ``head_ = svm_radius * head_mm_direction_``
        and ``query_ = svm_radius * mm_direction_``, with the selected tokens
        chosen by :func:`skntp.svm.joint_svm` (largest label margin).
        ``"signgd"``: sign descent; ``"nsd"``: normalized steepest descent in
        ``descent_norm``; ``"mirror"``, ``"nmirror"``: lp mirror descent with
        ``p = mirror_p``, plain or normalized.  Each fit records the norm that
        theory names for its solver's limit, ``limit_norm_``.
    key_query : array-like of shape (k, d), default=None
        The fixed key-query matrix ``W`` (keys ``K_i = X_i W^T``); ``None`` is
        the identity.
    init : None, "zeros", "random" or (array-like, array-like), default=None
        The start ``(v_0, p_0)`` of the gradient solvers: ``None`` or
        "random" draws ``v_0 ~ N(0, I/d)`` and ``p_0 ~ N(0, I/k)`` from
        ``random_state``; a pair gives the head (d,) and the query (k,).
    classes : array-like of 2 labels, default=None
        The two labels (sorted; the first is ``Y = -1``); ``None`` takes them
        from ``y``, which must then hold both.
    lr : float, default=0.1
        Step size (the paper's Fig. 3 uses normalized GD with 0.1).
    %(descent_parameters)s
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
        :func:`skntp.svm.joint_svm`, whose failure is
        :class:`~skntp.svm.UndecidedError`, never "not separable").
    compute_limits : bool, default=True
        Solve the head SVM and (ATT-SVM) for the selected tokens during
        ``fit`` (the directions and their alignment histories).
    svm_method : str, default="auto"
        Method of the max-margin core for the program in the limit norm
        (``limit_norm_``); the Frobenius program beside it always uses ``"auto"``.
    %(record_every)s
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
    head_mm_margin_ : float
        ``1 / ||v^mm||`` (0 when not separable).
    mm_margin_ : float
        ``1 / ||p^relax||`` (nan without a direction).
    svm_result_ : JointSVMResult or None
        The joint program's solution for ``solver="svm"``.
    support_ : ndarray of int
        Indices of the training inputs whose selected token is a support
        vector of the head SVM (the set ``S`` of Sec. 3.2).
    support_vectors_ : ndarray of shape (n_support, d)
        Those tokens ``x_{i alpha_i}``, ``i in S``.
    mm_direction_ : ndarray of shape (k,) or None
        Unit ``p^relax`` of eq. (10) (equal to ``p^mm`` when every selected
        token is a support vector); ``None`` when infeasible, or without
        constraints (one token per input: attention has nothing to select).
    att_svm_direction_ : ndarray of shape (k,) or None
        Unit ``p^mm(alpha)`` of (ATT-SVM); ``None`` when infeasible or without
        constraints.
    limit_norm_ : str or tuple
        The norm that theory names for the solver's limit
        (:func:`skntp.diagnostics.limit_norm`).  ``head_mm_direction_`` and
        ``mm_direction_`` (and their margins) are the head SVM and the relaxed
        ATT-SVM in this norm.  Thms. 5-6 are about the Frobenius norm; for
        another norm the joint limit is the package's conjecture, measured,
        not a theorem.
    limit_directions_, head_limit_directions_ : dict
        Norm -> unit direction of ``p`` and of ``v`` in ``limit_norm_`` and in the
        Frobenius norm; ``history_`` adds ``alignment_fro`` and
        ``head_alignment_fro``, the cosines with the Frobenius ones.
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
        ``att_svm_direction_``).  ``"regpath"`` and the scale-free solvers
        (``"ngd"``, ``"signgd"``, ``"nsd"``, ``"nmirror"``) run on ``log L``
        (same normalized steps, same constrained minimizers, no underflow at
        large norms): they add ``log_loss``, and their ``grad_norm`` is that of
        ``grad log L = grad L / L``; ``"regpath"`` also adds ``radius_0`` (``r``,
        the head's) and ``radius_1`` (``R``).
    trajectory_ : dict of ndarray
        The recorded iterates ``query`` (n_records, k) and ``head``
        (n_records, d).
    n_iter_ : int
    n_features_in_ : int
        Token dimension ``d`` for 3-D and list inputs; for a 2-D input
        ``(n, T)`` of scalar tokens, its number of columns ``T``.

    Raises
    ------
    FloatingPointError
        From ``fit``, when the units of the tokens put the limit beyond float64
        (its parameters scale as their inverse; e.g. a radius
        ``svm_radius="auto"`` that overflows).  Tokens of any magnitude from
        1e-150 to 1e150 give the same selections and predictions.

    Notes
    -----
    ``X`` is a 3-D array ``(n, T, d)`` or a list of ``(T_i, d)`` arrays (lengths
    may differ; padded tokens get no attention).  A 2-D array ``(n, T)`` is read
    as ``n`` sequences of ``T`` scalar tokens (``d = 1``).
    """

    _parameter_constraints = {
        "key_query": ["array-like", None],
        "init": [None, StrOptions({"zeros", "random"}), tuple, list],
        "classes": [None, "array-like"],
        "max_enumeration": [Interval(Integral, 1, None, closed="left")],
        **TRAINING_CONSTRAINTS,
        **BACKEND_CONSTRAINTS,
    }

    def __init__(self, solver="ngd", *, key_query=None, init=None, lr=0.1, power_t=0.0,
                 eps=1e-8, descent_norm="fro", mirror_p=2.0, max_iter=1000,
                 tol=0.0, path_radii=None, svm_radius="auto", max_enumeration=256,
                 classes=None, compute_limits=True, svm_method="auto", record_every=10,
                 backend="numpy", device=None, dtype="float64", random_state=None, verbose=0):
        self.solver = solver
        self.key_query = key_query
        self.init = init
        self.lr = lr
        self.power_t = power_t
        self.eps = eps
        self.descent_norm = descent_norm
        self.mirror_p = mirror_p
        self.max_iter = max_iter
        self.tol = tol
        self.path_radii = path_radii
        self.svm_radius = svm_radius
        self.max_enumeration = max_enumeration
        self.classes = classes
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
        """Fit the head and the attention weights by the chosen solver.

        Parameters
        ----------
        X : array-like of shape (n, T, d), list of (T_i, d) arrays, or (n, T)
            Input sequences (see Notes).
        y : array-like of shape (n,)
            Two classes; ``classes_[1]`` is mapped to ``Y = +1``.
        sample_weight : array-like of shape (n,), default=None
            Weights of the inputs in the risk.

        Returns
        -------
        self
        """
        return self._fit(X, y, sample_weight)

    # ------------------------------------------------------------- the model
    def _trains_vectors(self):
        return True  # the head v and the query p

    def _prepare(self, X, y, sample_weight):
        data = labelled_inputs(self, X, y, sample_weight)
        data.update(K=data["X"] @ data["W"].T, rng=check_random_state(self.random_state))
        return data

    def _explicit_limits(self, data):
        if self.solver != "svm":  # the directions of the tokens training selects: later
            return Limits()
        res, _ = self._solve_limit(
            "joint SVM", lambda cb: joint_svm(data["X"], data["Y"], data["K"],
                                              mask=data["mask"], callback=cb,
                                              max_enumeration=self.max_enumeration,
                                              method=self.svm_method), "")
        d = _joint_directions(self, data, res.selected, head=res.head, relaxed=res.relaxed,
                              att=res.att_svm, support=res.support)
        return Limits(svm_result_=res, directions=d)

    def _limit_parameters(self, data, limits):
        d = limits.attributes["directions"]
        if self.svm_radius == "auto":  # v: label margin 20; p: 20 nats on every separated token
            R_v = saturation_radius(d["label_gaps"])
            R_p = saturation_radius(d["attention_gaps"])
        else:
            R_v = R_p = float(self.svm_radius)
        self.svm_radius_ = (R_v, R_p)
        p = d["mm_direction_"]  # None: one token per input, any p gives the same model
        return (R_v * d["head_mm_direction_"],
                R_p * p if p is not None else np.zeros(data["K"].shape[2]))

    def _training(self, data, limits, be):
        n, T, d = data["X"].shape
        k = data["K"].shape[2]
        init = self.init
        parts = init if isinstance(init, (tuple, list)) else (init, init)
        if len(parts) != 2:
            raise ValueError("init must be 'zeros', 'random' or a pair (head, query).")
        v0 = self._initial(parts[0], (d,), data["rng"], default="random", divisor=np.sqrt(d),
                           name="init[0] (the head)")
        p0 = self._initial(parts[1], (k,), data["rng"], default="random", divisor=np.sqrt(k),
                           name="init[1] (the query)")
        # log L has the same minimizers on every ball (regpath) and the same gradient
        # direction in every block (the scale-free solvers: ngd, signgd, nsd, nmirror),
        # and does not underflow
        on_log = self.solver == "regpath" or self.solver in SCALE_FREE
        objective = self._objective(be, data, log=on_log)
        xp, Xb, Kb, maskb, Yb = be.xp, objective.X, objective.K, objective.mask, objective.y

        def metrics(params):
            v, p = params
            s = attention_weights(xp, Kb, p, maskb)
            f = attention_decision(xp, Xb, Kb, v, p, maskb)
            return {"norm": scaled_norm(p),
                    "head_norm": scaled_norm(v),
                    "attention_saturation": float(xp.mean(xp.max(s, axis=1))),
                    "label_probability": float(np.mean(expit(to_numpy(Yb * f)))),
                    "query": p, "head": v}

        radii = None
        if self.solver == "regpath":
            radii = default_radii(self.path_radii, start=0.5, stop=20.0, num=12)
            if radii.ndim == 2 and radii.shape[1] not in (1, 2):
                raise ValueError(f"path_radii must have shape (n_radii,) or (n_radii, 2), "
                                 f"got {radii.shape}.")
        return Training(objective, (v0, p0), metrics, radii=radii,
                        log_loss=self.solver in SCALE_FREE)

    def _objective(self, be, data, *, log):
        """The attention risk (ERM) in ``(v, p)`` with the logistic loss (Sec. 3)."""
        sw = data["sw"]
        return AttentionObjective(
            be.xp, be.asarray(data["X"]), be.asarray(data["Y"]), mask=be.asbool(data["mask"]),
            loss="logistic", W=be.asarray(data["W"]), train=("v", "p"), log=log,
            sample_weight=None if np.all(sw == sw[0]) else be.asarray(sw))

    def _trained_limits(self, data, limits, params):
        """The head SVM and the (relaxed) ATT-SVM of the tokens ``params`` select, in the
        limit norm and in Frobenius (those of the joint SVM for ``solver="svm"``)."""
        d = limits.attributes.get("directions")
        if d is None and self.compute_limits:
            mask = data["mask"]
            selected = np.argmax(attention_weights(np, data["K"], params[1], mask), axis=1)
            d = _joint_directions(self, data, selected, norm=self._limit_norm())
        elif d is None:
            d = _joint_directions(self, data, None)
        fro = d
        if self._limit_norm() != "fro" and d["selected_tokens_"] is not None:
            fro = _joint_directions(self, data, d["selected_tokens_"])
        return Limits(**limits.attributes | {"directions": d, "fro_directions": fro})

    def _fitted(self, data, limits, params, result):
        X, K, mask, Y = data["X"], data["K"], data["mask"], data["Y"]
        self.classes_, self.key_query_ = data["classes"], data["W"]
        self.head_, self.query_ = params
        self.svm_result_ = limits.attributes.get("svm_result_")
        d, fro = limits.attributes["directions"], limits.attributes["fro_directions"]
        for name, value in d.items():
            if name.endswith("_"):
                setattr(self, name, value)
        self.limit_norm_ = self._limit_norm()
        self.limit_directions_ = {self.limit_norm_: d["mm_direction_"],
                                  "fro": fro["mm_direction_"]}
        self.head_limit_directions_ = {self.limit_norm_: d["head_mm_direction_"],
                                       "fro": fro["head_mm_direction_"]}
        s = attention_weights(np, K, self.query_, mask)
        self.attention_saturation_ = float(s.max(axis=1).mean())
        self.alignment_ = cosine(self.query_, self.mm_direction_)
        self.head_alignment_ = cosine(self.head_, self.head_mm_direction_)
        if result is None:
            self.n_iter_ = 0
            be = backend_of(self)
            loss = float(self._objective(be, data, log=False)(
                (be.asarray(self.head_), be.asarray(self.query_)))[0])
            f = attention_decision(np, X, K, self.head_, self.query_, mask)
            self.history_ = self._svm_history(
                loss, (self.query_,), head_norm=scaled_norm(self.head_),
                attention_saturation=self.attention_saturation_,
                label_probability=expit(Y * f).mean(),
                alignment=1.0 if self.svm_radius_[1] > 0 else 0.0,
                head_alignment=1.0 if self.svm_radius_[0] > 0 else 0.0,
                att_svm_alignment=cosine(self.query_, self.att_svm_direction_))
            self.trajectory_ = {"query": self.query_[None].copy(),
                                "head": self.head_[None].copy()}
            return
        self.n_iter_ = result.n_iter
        hist = dict(result.history)
        if self.solver == "regpath" or self.solver in SCALE_FREE:
            hist["log_loss"] = hist["loss"]
            hist["loss"] = np.exp(hist["log_loss"])
        if self.solver == "regpath" and "radius_0" not in hist:
            hist["radius_0"] = hist["radius_1"] = hist["radius"]
        self.trajectory_ = {"query": hist.pop("query"), "head": hist.pop("head")}
        for key, direction in (("alignment", self.mm_direction_),
                               ("head_alignment", self.head_mm_direction_),
                               ("att_svm_alignment", self.att_svm_direction_),
                               ("alignment_fro", self.limit_directions_["fro"]),
                               ("head_alignment_fro", self.head_limit_directions_["fro"])):
            name = "head" if key.startswith("head_") else "query"
            hist[key] = np.array([cosine(it, direction) for it in self.trajectory_[name]])
        self.history_ = hist

    # ------------------------------------------------------------- predict
    def _validated(self, X):
        X, mask = check_attention_input(self, X, reset=False)
        return X, mask, X @ self.key_query_.T

    def attention_weights(self, X):
        """Softmax attention ``S(K_i p)`` of shape (n, T) (zero at padding)."""
        X, mask, K = self._validated(X)
        return attention_weights(np, K, self.query_, mask)

    def transform(self, X):
        """Attention features ``X_i^T S(K_i p)`` of shape (n, d) (Sec. 3, ``x_i^p``)."""
        X, mask, K = self._validated(X)
        return attention_features(np, X, attention_weights(np, K, self.query_, mask))

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
