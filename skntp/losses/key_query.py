"""The key-query model's risk ("Transformers as Support Vector Machines",
Tarzanagh, Li, Thrampoulidis, Oymak 2023): logits ``z_i^T W x_it`` with one query
``z_i`` per input, ``W`` trained directly or as factors ``Q K^T``, and the value heads
``f = v^T sigma(V X^T s)`` of its Sec. 5.

The risk and its gradients are those of :mod:`skntp.losses.attention` (written once)
on the lifted keys ``vec(z_i x_it^T)``; this module adds the value heads (a forward
pass for its ``forward=``) and the factored parameterization.
"""

from __future__ import annotations

import functools

from .._backend import lifted_keys
from .attention import (
    AttentionObjective,
    _anchor,
    attention_features,
    attention_weights,
    risk_options,
)

__all__ = ["ACTIVATIONS", "KeyQueryProblem", "head_activation", "value_head"]

#: elementwise activations of the head: ``(sigma, sigma')``
ACTIVATIONS = ("identity", "relu")


def head_activation(xp, name, a):
    """``sigma(a)`` and ``sigma'(a)`` (``relu'(0) = 0``)."""
    if name == "identity":
        return a, xp.ones_like(a)
    if name == "relu":
        return xp.maximum(a, xp.zeros_like(a)), xp.astype(a > 0, a.dtype)
    raise ValueError(f"activation must be one of {ACTIVATIONS}, got {name!r}.")


def value_head(value, activation):
    """The forward pass of the head ``f = v^T sigma(V X^T s)`` for
    :func:`~skntp.losses.attention.attention_loss_grad` and
    :func:`~skntp.losses.attention.attention_decision` (``forward=``); ``None`` for the
    linear head (``V = I``, ``sigma`` the identity).

    ``value`` : array of shape ``(d_v, d)`` or None (``V = I``); ``activation`` : one of
    :data:`ACTIVATIONS`.
    """
    if value is None and activation == "identity":
        return None
    return functools.partial(_value_head_forward, value=value, activation=activation)


def _value_head_forward(xp, X, K, v, p, mask, *, value, activation):
    """``(s, dh, df, f, k_ref)`` of the head ``f = v^T sigma(V X^T s)``.

    The logit sensitivities are ``s_t (h_t - s^T h)`` with
    ``h_t = (V^T (v * sigma'(V X^T s)))^T x_t``, the linearization of ``f`` in
    the attention; ``dh``, ``df`` are taken relative to the most attended
    token as in :func:`skntp.losses.attention._anchored_forward`.
    """
    s = attention_weights(xp, K, p, mask)                      # (n, T)
    a = attention_features(xp, X, s)                           # (n, d)
    if value is not None:
        a = a @ value.T                                        # (n, d_v)
    act, slope = head_activation(xp, activation, a)
    f = act @ v
    w = v * slope
    if value is not None:
        w = w @ value                                          # (n, d)
    h = (X @ w[..., None])[..., 0]                             # (n, T)
    dh, df, _, k_ref = _anchor(xp, s, h, K, mask)
    return s, dh, df, f, k_ref


class KeyQueryProblem:
    """The risk in the key-query matrix ``W`` with one query ``z_i`` per input.

    The logits are ``z_i^T W x_it`` (``W`` of shape ``(k, d)``).  With
    ``parameterization="W"`` the trained block is ``W``; with ``"KQ"`` it is the
    pair of factors ``(Q, K)``, ``W = Q K^T`` with ``Q`` of shape ``(k, r)`` and
    ``K`` of shape ``(d, r)``, whose gradients are ``dL/dQ = G K`` and
    ``dL/dK = G^T Q`` (``G = dL/dW``).  Normalized GD then normalizes each
    factor's gradient separately, as in the public code of the paper.

    Parameters
    ----------
    be : Backend
    X : ndarray of shape (n, T, d)
    Y : ndarray of shape (n,)
    v : ndarray of shape (d,)
    Z : ndarray of shape (n, k)
        The queries.
    parameterization : {"W", "KQ"}
    mask, sample_weight : ndarrays or None
    loss : str
    saturation_scale : bool, default=False
        Gradients to a positive factor once the softmax saturates beyond
        float64 (for normalized GD; :class:`AttentionObjective`).
    value, activation :
        The head ``v^T sigma(V X^T s)`` (see :func:`attention_loss_grad`).

    The instance is the objective of the training loop: ``problem(params) ->
    (risk, grads)``.
    """

    def __init__(self, be, X, Y, v, Z, parameterization, *, mask=None, sample_weight=None,
                 loss="logistic", saturation_scale=False, value=None, activation="identity"):
        xp = be.xp
        self.be, self.parameterization = be, parameterization
        self.shape = (Z.shape[1], X.shape[2])
        common = risk_options(be, v, mask, sample_weight, loss)
        Xb = be.asarray(X)
        self.keys = lifted_keys(xp, Xb, be.asarray(Z))
        self.mask = common["mask"]
        self.inner = AttentionObjective(
            xp, Xb, be.asarray(Y), train=("p",), keys=self.keys,
            saturation_scale=saturation_scale,
            forward=value_head(None if value is None else be.asarray(value), activation),
            **common)
        self.work_size = self.inner.work_size * self.shape[0]

    @property
    def log_grad_scale(self):
        """The log of the factor of the last gradients (0 unless saturated)."""
        return self.inner.log_grad_scale

    def matrix(self, params):
        """``W`` from the trained blocks."""
        return params[0] if self.parameterization == "W" else params[0] @ params[1].T

    def effective(self, params):
        """``vec(W)``: the query of the lifted keys."""
        return self.be.xp.reshape(self.matrix(params), (-1,))

    def __call__(self, params):
        """``(risk, grads)`` of the trained blocks (the objective of the loop)."""
        xp = self.be.xp
        risk, (g,) = self.inner((self.effective(params),))
        G = xp.reshape(g, self.shape)
        if self.parameterization == "W":
            return risk, (G,)
        Q, K = params
        return risk, (G @ K, G.T @ Q)
