"""Next-token prediction with unconstrained features (NTP-UFM): the loss.

Zhao, Behnia, Vakilian, Thrampoulidis, "Implicit Geometry of Next-token
Prediction" (2024): word embeddings ``W`` (``V x d``) and one free embedding
per distinct context ``H`` (``d x m``), logits ``L = W H``, trained on the NTP
cross-entropy over the sparse soft labels ``p_hat_j``, optionally with the
weight decay ``(lambda / 2)(||W||_F^2 + ||H||_F^2)`` (whose minimum over the
factorizations of ``L`` is ``lambda ||L||_*``).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["FactoredCrossEntropy"]


class FactoredCrossEntropy:
    """``CE(W H) + (lambda / 2)(||W||^2 + ||H||^2)`` and its gradients in ``(W, H)``.

    ``CE(L) = -sum_j pi_j sum_z p_hat_{jz} log softmax(L e_j)_z``.  With
    ``G = diag(pi) (softmax(L^T) - P)`` (``m x V``) the gradients are
    ``G^T H^T + lambda W`` and ``W^T G^T + lambda H``.  The softmax is
    max-shifted, and each row's mass is split into its support and the rest,
    summed apart: in-support entries of ``G`` are ``(q_z - p_hat_z) - q_z out``
    (``q`` the softmax restricted to ``S_j``, ``out`` the out-of-support mass),
    which keeps the out-of-support part that ``p_z - p_hat_z`` would round away
    at large norms (as :class:`~skntp.losses.decoder.CrossEntropy` does).
    Written once over the array namespace (NumPy or torch).

    Parameters
    ----------
    be : Backend
    context_weights : ndarray of shape (m,)
        ``pi_j``.
    next_token_probs : ndarray or sparse matrix of shape (m, V)
        ``p_hat_j``, rows summing to one (held dense: ``m * V`` numbers).
    weight_decay : float, default=0.0
        ``lambda``.
    n_components : int, default=1
        ``d`` (only sizes the BLAS thread pool: :func:`skntp._backend.blas_threads`).
    """

    def __init__(self, be, context_weights, next_token_probs, weight_decay=0.0,
                 n_components=1):
        self.xp = be.xp
        P = (next_token_probs.toarray() if sp.issparse(next_token_probs)
             else np.asarray(next_token_probs, dtype=float))
        self.P = be.asarray(P)
        self.inside = be.asarray((P > 0).astype(float))
        self.pi = be.asarray(np.asarray(context_weights, dtype=float)[:, None])
        self.weight_decay = float(weight_decay)
        self.work_size = P.size * int(n_components)  # multiply-adds of one product

    def __call__(self, params):
        xp = self.xp
        W, H = params
        L = H.T @ W.T  # (m, V): one row per context
        L = L - xp.max(L, axis=1, keepdims=True)
        E = xp.exp(L)
        E_in = E * self.inside
        s_in = xp.sum(E_in, axis=1, keepdims=True)
        s_out = xp.sum(E - E_in, axis=1, keepdims=True)
        s = s_in + s_out
        log_s = xp.log(s_in) + xp.log1p(s_out / s_in)
        loss = xp.sum(self.pi * log_s) - xp.sum(self.pi * self.P * L)
        q = E_in / s_in
        G = self.pi * ((q - self.P) - q * (s_out / s) + (E - E_in) / s)
        gW = G.T @ H.T
        gH = W.T @ G.T
        if self.weight_decay:
            lam = self.weight_decay
            loss = loss + 0.5 * lam * (xp.sum(W * W) + xp.sum(H * H))
            gW = gW + lam * W
            gH = gH + lam * H
        return loss, (gW, gH)
