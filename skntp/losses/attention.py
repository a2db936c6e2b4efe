"""The attention model's math, written once over an array namespace ``xp``.

Model (Tarzanagh et al., "Max-Margin Token Selection in Attention
Mechanism", eq. (5) and (ERM)):

.. math::

    f(X) = v^T X^T \\mathbb{S}(K p), \\qquad K = X W^T, \\qquad
    \\mathcal{L}(v, p) = \\sum_i w_i\\, \\ell(Y_i f(X_i)) / \\sum_i w_i .

Every function takes the namespace ``xp`` first and works on NumPy and torch
arrays alike.  Shapes may carry any number of leading *batch* axes ``...``
(independent problems, e.g. the trials of the Fig. 9 sweep):

* ``X``     : ``(..., n, T, d)`` tokens (padded; ``mask`` marks real ones)
* ``K``     : ``(..., n, T, k)`` keys ``X W^T``
* ``mask``  : ``(..., n, T)`` bool or ``None`` (all real)
* ``y``     : ``(..., n)`` labels in ``{-1, +1}``
* ``v``     : ``(..., d)`` head;  ``p`` : ``(..., k)`` query
* ``sample_weight`` : ``(..., n)`` or ``None`` (uniform)

Padded tokens get exactly zero attention: their logits are replaced by
``-inf`` with ``where`` before the max-shifted softmax (no NaN as long as
every sequence has one real token).

Gradients are closed-form.  With ``s_i = S(K_i p)``, ``h_i = X_i v``
(``h_it = v^T x_it``), ``f_i = s_i^T h_i`` and
``c_i = w_i Y_i l'(Y_i f_i) / sum_j w_j``:

* ``dL/dp = sum_i c_i K_i^T (s_i * (h_i - f_i))`` (softmax Jacobian
  ``diag(s) - s s^T``, App. A.1); ``h_i - f_i`` is computed relative to the
  most attended token, ``(h_i - h_ref) - s_i^T (h_i - h_ref)``, which stays
  accurate when the softmax saturates (no cancellation against ``1``);
* ``dL/dv = sum_i c_i X_i^T s_i``;
* ``dL/dW = p g^T`` with ``g = sum_i c_i X_i^T (s_i * (h_i - f_i))``
  (keys ``K = X W^T``, the parameterization of Lemma 1), with the tokens
  taken relative to the most attended ones as the keys are below.

Both the model of Sec. 2 (``p`` or ``W`` trained, :class:`~skntp.AttentionSelector`)
and the joint model of Sec. 3 (``v`` and ``p`` trained together,
:class:`~skntp.JointAttentionSVM`) use this one risk and gradient.  The
query gradient is written with the keys relative to the most attended one,
``r_i^T (K_i - k_ref)`` (equal to ``r_i^T K_i`` since ``sum_t r_it = 0``),
which stays accurate when the softmax saturates (the other keys may be ``0``
and ``r_i`` tiny).  With ``log=True`` the risk is returned as ``log L``,
computed in the log domain (finite when ``L`` underflows), with gradient
``grad L / L``: the same minimizers over every ball and the same normalized
gradient, well scaled at any norm.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import log_softmax, logsumexp, softmax

__all__ = [
    "LOSSES",
    "AttentionObjective",
    "QueryProblem",
    "attention_decision",
    "attention_features",
    "attention_logits",
    "attention_loss_grad",
    "attention_weights",
    "compute_keys",
    "gradient_units",
    "loss_and_derivative",
]

LOSSES = ("logistic", "exponential", "correlation")


def compute_keys(xp, X, W):
    """Keys ``K = X W^T``.

    Parameters
    ----------
    X : array of shape (..., n, T, d)
    W : array of shape (k, d) or None
        Key-query matrix; ``None`` means the identity (``K = X``).

    Returns
    -------
    K : array of shape (..., n, T, k)
    """
    if W is None:
        return X
    return X @ W.T


def attention_logits(xp, K, p, mask=None):
    """Attention logits ``K_i p`` of shape ``(..., n, T)``, ``-inf`` at padding.

    Parameters
    ----------
    K : array of shape (..., n, T, k)
    p : array of shape (..., k)
    mask : bool array of shape (..., n, T) or None
    """
    logits = (K @ p[..., None, :, None])[..., 0]
    if mask is not None:
        logits = xp.where(mask, logits, xp.full_like(logits, -float("inf")))
    return logits


def attention_weights(xp, K, p, mask=None):
    """Softmax attention ``S(K_i p)`` of shape ``(..., n, T)`` (zero at padding).

    Max-shifted, so finite for any norm of ``p``.
    """
    return softmax(xp, attention_logits(xp, K, p, mask), axis=-1)


def attention_features(xp, X, s):
    """Attention features ``X_i^T s_i`` of shape ``(..., n, d)``.

    Parameters
    ----------
    X : array of shape (..., n, T, d)
    s : array of shape (..., n, T)
        Attention weights (from :func:`attention_weights`).
    """
    return (s[..., None, :] @ X)[..., 0, :]


def loss_and_derivative(xp, loss, u):
    """The loss ``l(u)`` and its derivative ``l'(u)`` elementwise.

    Parameters
    ----------
    loss : {"logistic", "exponential", "correlation"}
        ``log(1 + e^{-u})``, ``e^{-u}`` or ``-u`` (Assumption A).
    u : array
        Margins ``Y_i f(X_i)``.

    Returns
    -------
    value, derivative : arrays shaped like ``u``
        The logistic loss is computed as ``max(-u, 0) + log1p(e^{-|u|})`` and
        its derivative as ``-sigmoid(-u)``: finite for any ``u``.
    """
    if loss == "logistic":
        e = xp.exp(-xp.abs(u))
        value = xp.maximum(-u, xp.zeros_like(u)) + xp.log1p(e)
        # -sigmoid(-u) = -1/(1+e^u), stable on both sides
        deriv = xp.where(u >= 0, -e / (1.0 + e), -1.0 / (1.0 + e))
        return value, deriv
    if loss == "exponential":
        value = xp.exp(-u)
        return value, -value
    if loss == "correlation":
        return -u, -xp.ones_like(u)
    raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}.")


def _anchored_forward(xp, X, K, v, p, mask):
    """``(s, dh, df, f, k_ref)``: the forward pass relative to the most attended token.

    ``h_it = v^T x_it``; ``dh = h - h_ref`` and ``df = f - h_ref`` with
    ``h_ref``, ``k_ref`` the mean ``h`` and key over the most attended tokens:
    when the softmax saturates, ``h_t - f = sum_tau s_tau (h_t - h_tau)`` is a
    sum of tiny terms, which ``h_t - s^T h`` would cancel to rounding noise.
    """
    s = attention_weights(xp, K, p, mask)                      # (..., n, T)
    h = (X @ v[..., None, :, None])[..., 0]                    # (..., n, T)
    dh, df, h_ref, k_ref = _anchor(xp, s, h, K, mask)
    return s, dh, df, (h_ref + df)[..., 0], k_ref


def _anchor(xp, s, h, K, mask):
    """``(dh, df, h_ref, k_ref)``: ``h`` and ``f - h_ref = s^T dh`` relative to the mean
    ``h`` and key of the most attended tokens."""
    top = xp.astype(s >= xp.max(s, axis=-1, keepdims=True), s.dtype)
    count = xp.sum(top, axis=-1, keepdims=True)
    h_ref = xp.sum(h * top, axis=-1, keepdims=True) / count
    k_ref = (top[..., None, :] @ K)[..., 0, :] / count          # (..., n, k)
    dh = h - h_ref
    if mask is not None:
        dh = xp.where(mask, dh, xp.zeros_like(dh))
    return dh, xp.sum(s * dh, axis=-1, keepdims=True), h_ref, k_ref


def attention_decision(xp, X, K, v, p, mask=None, forward=None):
    """``f(X_i) = v^T X_i^T S(K_i p)``, shape ``(..., n)`` (eq. (5)); ``forward`` another
    head's forward pass (see :func:`attention_loss_grad`)."""
    return (forward or _anchored_forward)(xp, X, K, v, p, mask)[3]


def _log_loss_terms(xp, loss, u):
    """``log l(u)`` and ``l'(u) / l(u)`` for the losses that are positive."""
    if loss == "logistic":
        # l = softplus(-u); log l = -u - log1p(...) for large u (l underflows there)
        softplus_neg = xp.maximum(-u, xp.zeros_like(u)) + xp.log1p(xp.exp(-xp.abs(u)))
        tiny = float(xp.finfo(u.dtype).smallest_normal)
        big = xp.minimum(u, xp.full_like(u, 700.0))
        log_l = xp.where(u > 30.0, -u - 0.5 * xp.exp(-big),
                         xp.log(xp.maximum(softplus_neg, xp.full_like(u, tiny))))
        # l'/l = -sigmoid(-u)/softplus(-u) = -exp(-softplus(u) - log l)
        return log_l, -xp.exp(-(softplus_neg + u) - log_l)
    if loss == "exponential":
        return -u, -xp.ones_like(u)
    raise ValueError(f"log=True needs a positive loss ('logistic' or 'exponential'), "
                     f"got {loss!r}.")


#: below this log-attention the query gradient would underflow float64
_SATURATED_LOG_ATTENTION = -300.0


#: a non-top attention above this (log above -230) is far from saturated
_UNSATURATED_ATTENTION = 1e-100


def _saturation_shift(xp, K, p, mask, s=None):
    """``(s_scaled, sigma)``: the attention of the non-top tokens times ``e^{-sigma}``.

    ``sigma = max_{i, t != top_i} log S(K_i p)_t + 300`` when that maximum is
    below ``-300`` (the softmax saturated: the query gradient, proportional
    to those attentions, would underflow), else 0 (no scaling).  Top tokens
    get 0 (their term of the gradient is written with the others', see
    :func:`attention_loss_grad`).  Only one top token per input is scaled;
    with ties at the top the attention is not saturated and ``sigma = 0``.
    ``s``, the attention ``S(K_i p)`` if already computed, answers the common
    case without the log-attention: an input with two top tokens, or with a
    second one above :data:`_UNSATURATED_ATTENTION`, is not saturated.
    """
    if s is not None:
        top = s >= xp.max(s, axis=-1, keepdims=True)
        second = xp.max(xp.where(top, xp.zeros_like(s), s))
        if float(second) > _UNSATURATED_ATTENTION or not bool(
                xp.all(xp.sum(xp.astype(top, s.dtype), axis=-1) == 1)):
            return None, 0.0
    log_s = log_softmax(xp, attention_logits(xp, K, p, mask), axis=-1)
    top = log_s >= xp.max(log_s, axis=-1, keepdims=True)
    rest = xp.where(top, xp.full_like(log_s, -float("inf")), log_s)
    worst = float(xp.max(rest))
    single = bool(xp.all(xp.sum(xp.astype(top, log_s.dtype), axis=-1) == 1))
    if not (single and -float("inf") < worst < _SATURATED_LOG_ATTENTION):
        return None, 0.0
    sigma = worst - _SATURATED_LOG_ATTENTION
    return xp.where(top, xp.zeros_like(log_s), xp.exp(rest - sigma)), sigma


def attention_loss_grad(xp, X, K, y, v, p, *, mask=None, loss="logistic",
                        sample_weight=None, wrt=("p",), log=False, saturation_scale=False,
                        forward=None, units=None):
    """Risk (ERM) and its closed-form gradients.

    Parameters
    ----------
    X : array of shape (..., n, T, d)
    K : array of shape (..., n, T, k)
        Keys (``X W^T``; ``X`` itself for ``W = I``).
    y : array of shape (..., n)
        Labels in ``{-1, +1}``.
    v : array of shape (..., d)
        Head.
    p : array of shape (..., k)
        Query.
    mask : bool array of shape (..., n, T) or None
    loss : {"logistic", "exponential", "correlation"}
    sample_weight : array of shape (..., n) or (n,), or None
        Weights ``w_i`` (the risk is their weighted mean).
    wrt : tuple of {"p", "v", "W"}
        Gradients to return, in this order.  ``"W"`` assumes ``K = X W^T``
        and returns ``dL/dW = p g^T`` of shape ``(..., k, d)``.
    log : bool, default=False
        Return ``log L`` and the gradients of ``log L`` (``grad L / L``),
        computed in the log domain (positive losses only).
    saturation_scale : bool, default=False
        When the softmax is saturated beyond float64 (every non-selected
        attention below ``e^{-300}``, where the query gradient, proportional
        to them, underflows to zero) return the ``"p"`` and ``"W"`` gradients
        multiplied by ``e^{-sigma}`` (``sigma`` the log of the largest such
        attention plus 300): a positive factor, so the *direction* is exact,
        which is all normalized GD uses.  The log of the factor is returned as
        a third element, ``-sigma`` (0 when not saturated), less
        ``log(h_unit * k_unit)`` with ``units``.
    units : tuple of two floats or None, default=None
        With ``saturation_scale``: ``(h_unit, k_unit)``, positive divisors of the
        head outputs and of the keys (``"p"``) or tokens (``"W"``) in the
        attention gradient, so that it neither underflows nor overflows where
        the data's units would take it out of float64 (:func:`gradient_units`).
    forward : callable or None
        The head's forward pass ``(xp, X, K, v, p, mask) -> (s, dh, df, f, k_ref)``
        (:func:`_anchored_forward`'s outputs); ``None``: the linear head ``v^T X^T s``.
        Another head (the value heads of :mod:`skntp.losses.key_query`) gives only
        the attention gradients (``"p"``, ``"W"``).

    Returns
    -------
    loss : array of shape (...)
        The risk of every batch element (0-d without batch axes).
    grads : tuple of arrays
        One per entry of ``wrt``.
    log_scale : float
        Only with ``saturation_scale=True``: the log of the factor of the
        gradients.
    """
    if forward is not None and "v" in wrt:
        raise ValueError("the head's gradient 'v' is only given for the linear head "
                         "(value=None, activation='identity').")
    s, dh, df, f, k_ref = (forward or _anchored_forward)(xp, X, K, v, p, mask)
    s_scaled, sigma = (_saturation_shift(xp, K, p, mask, s) if saturation_scale
                       else (None, 0.0))
    u = y * f
    w = xp.ones_like(y) if sample_weight is None else sample_weight * xp.ones_like(y)
    total = xp.sum(w, axis=-1, keepdims=True)
    if log:
        log_l, ratio = _log_loss_terms(xp, loss, u)
        log_wl = xp.where(w > 0, log_l + xp.log(xp.where(w > 0, w, xp.ones_like(w))),
                          xp.full_like(w, -float("inf")))
        lse = logsumexp(xp, log_wl, axis=-1)                   # log sum_i w_i l_i
        risk = (lse - xp.log(total))[..., 0]
        c = y * ratio * xp.exp(log_wl - lse)                   # w_i y_i l'_i / (sum w L)
    else:
        value, deriv = loss_and_derivative(xp, loss, u)
        risk = xp.sum(w * value, axis=-1) / total[..., 0]
        c = w * y * deriv / total
    grads = []
    log_scale = -sigma
    h_unit, k_unit = units if units is not None and saturation_scale else (1.0, 1.0)
    if h_unit != 1.0 or k_unit != 1.0:
        dh, df = dh / h_unit, df / h_unit
        log_scale -= math.log(h_unit) + math.log(k_unit)
    if any(name in ("p", "W") for name in wrt):
        if s_scaled is None:
            r = c[..., None] * s * (dh - df)                   # (..., n, T), sums to 0
        else:
            # e^{-sigma} s_t (dh_t - df) = s~_t dh_t - s_t df~ with df~ = sum_t s~_t dh_t
            # (dh_top = 0): every term representable however saturated the softmax
            df_scaled = xp.sum(s_scaled * dh, axis=-1, keepdims=True)
            r = c[..., None] * (s_scaled * dh - s * df_scaled)
    for name in wrt:
        if name == "p":
            rel = K - k_ref[..., None, :]
            rel = rel if k_unit == 1.0 else rel / k_unit
            grads.append(xp.sum((r[..., None, :] @ rel)[..., 0, :], axis=-2))
        elif name == "v":
            cs = c[..., None] * s
            grads.append(xp.sum((cs[..., None, :] @ X)[..., 0, :], axis=-2))
        elif name == "W":
            # tokens relative to the most attended ones (sum_t r_t = 0), as the keys
            # of "p": exact when the softmax saturates with tied top tokens
            top = xp.astype(s >= xp.max(s, axis=-1, keepdims=True), s.dtype)
            x_ref = (top[..., None, :] @ X)[..., 0, :] / xp.sum(top, axis=-1, keepdims=True)
            rel = X - x_ref[..., None, :]
            rel = rel if k_unit == 1.0 else rel / k_unit
            g = xp.sum((r[..., None, :] @ rel)[..., 0, :], axis=-2)   # (..., d)
            grads.append(p[..., :, None] * g[..., None, :])
        else:
            raise ValueError(f"unknown gradient {name!r}; choose from 'p', 'v', 'W'.")
    if saturation_scale:
        if s_scaled is not None and "v" in wrt:
            raise ValueError("saturation_scale=True scales the attention gradients only; "
                             "it cannot be combined with the head's gradient 'v'.")
        return risk, tuple(grads), log_scale
    return risk, tuple(grads)


#: the head outputs times the keys within this range: the attention gradient (their
#: products, summed) is computed as is
_WELL_SCALED_GRADIENT = (1e-100, 1e100)


def gradient_units(xp, X, K, train):
    """``units`` of :func:`attention_loss_grad` for tokens ``X`` and keys ``K``: ``None``
    when the gradient is in float64's range as is, else ``(max|X|, max|K|)`` (``max|X|``
    for the tokens of ``"W"``), the magnitudes of the head outputs and of the keys.

    Where the scores multiply two data factors (the key-query model's lifted keys
    ``vec(z_i x_it^T)``) the gradient is cubic in the data: tokens of magnitude
    1e-140 make it 1e-420, zero in float64, however far from its minimizer.
    """
    def top(a):
        m = float(xp.max(xp.abs(a))) if a is not None and math.prod(a.shape) else 0.0
        return m if 0.0 < m < float("inf") else 1.0

    h_unit = top(X)
    k_unit = top(X) if "W" in train or K is None else top(K)
    low, high = _WELL_SCALED_GRADIENT
    return None if low <= h_unit * k_unit <= high else (h_unit, k_unit)


class AttentionObjective:
    """Objective for :func:`skntp._optim.minimize` over chosen parameter blocks.

    ``AttentionObjective(xp, X, y, mask=..., loss=..., v=..., p=..., W=...,
    train=("p",))`` is a callable ``params -> (loss, grads)`` where
    ``params`` holds the blocks named in ``train`` (in that order) and the
    other parameters stay fixed at the values given here.

    Parameters
    ----------
    xp : namespace
    X : array of shape (..., n, T, d)
    y : array of shape (..., n)
    mask : bool array or None
    loss : str
    v : array of shape (..., d) or None
        Head (required unless trained).
    p : array of shape (..., k) or None
        Query (required unless trained).
    W : array of shape (k, d) or None
        Key-query matrix (``None``: identity).  When ``"W"`` is trained its
        current value replaces this one.
    train : tuple of {"p", "v", "W"}
    sample_weight : array or None
    grad_scale : float or sequence of floats, default=1.0
        Multiplies the gradient of each trained block (a fixed
        preconditioner; e.g. ``1/||p||^2`` for ``W`` as in Lemma 1).
    batched : bool, default=False
        With leading batch axes the returned loss is the *sum* of the batch
        risks (the problems are independent, so each block's gradient is
        that of its own risk).
    log : bool, default=False
        Minimize ``log L`` instead of ``L`` (see :func:`attention_loss_grad`):
        the same minimizers over every ball (the regularization path) and the
        same normalized steps, without underflow at large norms.
    keys : array of shape (..., n, T, k) or None
        Keys given directly (e.g. the lifted keys ``vec(z_i x_it^T)`` of
        :class:`skntp.losses.key_query.KeyQueryProblem`) instead of ``X W^T``.
    saturation_scale : bool, default=False
        Return the attention gradients times a positive factor once the
        softmax saturates beyond float64, or where the data's units would take
        them out of float64 (:func:`gradient_units`, fixed at construction; see
        :func:`attention_loss_grad`; for normalized GD, which only uses their
        direction).  The log of the last factor is ``log_grad_scale``.
    forward : callable or None
        The head's forward pass (see :func:`attention_loss_grad`).
    """

    def __init__(self, xp, X, y, *, mask=None, loss="logistic", v=None, p=None, W=None,
                 train=("p",), sample_weight=None, grad_scale=1.0, batched=False,
                 log=False, keys=None, saturation_scale=False, forward=None):
        self.xp, self.X, self.y, self.mask, self.loss = xp, X, y, mask, loss
        self.v, self.p, self.W = v, p, W
        self.train = tuple(train)
        self.sample_weight = sample_weight
        if isinstance(grad_scale, (int, float)):
            grad_scale = (float(grad_scale),) * len(self.train)
        self.grad_scale = tuple(grad_scale)
        self.batched = batched
        self.log = log
        self.saturation_scale = saturation_scale
        self.log_grad_scale = 0.0
        self.forward = forward
        self.K = keys if keys is not None else (
            None if "W" in self.train else compute_keys(xp, X, W))
        # (the attention gradients only: saturation_scale excludes the head's)
        self.units = (gradient_units(xp, X, self.K, self.train)
                      if saturation_scale and "v" not in self.train else None)
        # multiply-adds of a call (BLAS threads: skntp._backend.blas_threads)
        self.work_size = int(math.prod(X.shape)) * (1 if W is None else int(W.shape[0]))

    def __call__(self, params):
        xp = self.xp
        cur = dict(zip(self.train, params, strict=True))
        v = cur.get("v", self.v)
        p = cur.get("p", self.p)
        K = compute_keys(xp, self.X, cur["W"]) if "W" in cur else self.K
        out = attention_loss_grad(
            xp, self.X, K, self.y, v, p, mask=self.mask, loss=self.loss,
            sample_weight=self.sample_weight, wrt=self.train, log=self.log,
            saturation_scale=self.saturation_scale, forward=self.forward, units=self.units,
        )
        risk, grads = out[:2]
        if self.saturation_scale:
            self.log_grad_scale = out[2]
        grads = tuple(g * sc if sc != 1.0 else g
                      for g, sc in zip(grads, self.grad_scale, strict=True))
        return (xp.sum(risk) if self.batched else risk), grads


def risk_options(be, v, mask, sample_weight, loss):
    """The fixed options of :class:`AttentionObjective` on backend ``be``: ``None`` for
    an all-true mask and for uniform weights (the cheaper paths, the same risk)."""
    uniform = sample_weight is None or bool(np.all(sample_weight == sample_weight[0]))
    return {"mask": None if mask is None or mask.all() else be.asbool(mask), "loss": loss,
            "v": be.asarray(v), "sample_weight": None if uniform else be.asarray(sample_weight)}


class QueryProblem:
    """The risk of Sec. 2 in the query ``p`` or, by Lemma 1, in ``W`` with a fixed ``u``.

    With ``u`` given the trained block is ``W`` (keys ``X W^T``, query ``u``):
    the iterates ``W(t)^T u`` of GD with step ``lr / ||u||^2`` (normalized GD:
    ``lr / ||u||``; path radii ``/ ||u||``) follow exactly those of ``p`` with
    ``W = I`` from ``W(0)^T u``, so every direction is computed for the
    *effective query* ``W^T u`` on the keys ``X``.

    Parameters
    ----------
    be : Backend
    X : ndarray of shape (n, T, d)
    Y : ndarray of shape (n,)
    v : ndarray of shape (d,)
        The fixed head.
    W : ndarray of shape (k, d) or None
        The key-query matrix (``None``: identity); the start of ``W`` when ``u``
        is given.
    u : ndarray of shape (k,) or None
        The fixed query of the ``W`` parameterization.
    mask, sample_weight : ndarrays or None
    loss : str

    Attributes
    ----------
    objective : AttentionObjective
    keys : backend array
        The keys the effective query acts on.
    step_scale, radius_scale : float
        Factors of the step of ``solver`` and of the path radii (Lemma 1).
    """

    def __init__(self, be, X, Y, v, W, u, *, mask=None, sample_weight=None, loss="logistic"):
        xp = be.xp
        self.be, self.u = be, u
        common = risk_options(be, v, mask, sample_weight, loss)
        Xb = be.asarray(X)
        self.mask = common["mask"]
        if u is None:
            Wb = None if W is None else be.asarray(W)
            self.objective = AttentionObjective(xp, Xb, be.asarray(Y), train=("p",), W=Wb,
                                                **common)
            self.keys = Xb if Wb is None else compute_keys(xp, Xb, Wb)
            self.norm_u = 1.0
        else:
            self.ub = be.asarray(u)
            self.objective = AttentionObjective(xp, Xb, be.asarray(Y), p=self.ub,
                                                train=("W",), **common)
            self.keys = Xb
            self.norm_u = float(np.linalg.norm(u))

    def step(self, lr, solver):
        """The step of ``solver`` on the trained block (Lemma 1 for ``W``)."""
        if self.u is None:
            return lr
        return lr / self.norm_u**2 if solver == "gd" else lr / self.norm_u

    def effective(self, params):
        """The effective query: ``p``, or ``W^T u``."""
        return params[0] if self.u is None else params[0].T @ self.ub

    def start(self, direction):
        """The trained block that puts the effective query at ``direction``."""
        if self.u is None:
            return (self.be.asarray(direction),)
        return (self.be.asarray(np.outer(self.u, direction) / self.norm_u),)
