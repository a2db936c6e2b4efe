"""NTP-separable programs at scale: planted tied supports, no exchangeable tokens."""

from __future__ import annotations

import numpy as np
from sklearn.utils import Bunch
from sklearn.utils.validation import check_random_state

__all__ = ["make_ntp_svm_data"]


def make_ntp_svm_data(n_contexts=1000, n_features=256, n_tokens=500, *, max_support=5,
                      margin=0.05, random_state=None):
    """Distinct contexts and supports whose NTP-SVM is feasible, with tied supports.

    A teacher ``W0`` with unit rows is planted; each context ``h_j ~ N(0, I_d)``
    gets a support size ``k_j`` uniform in ``1..max_support`` and the support
    ``S_j``, the ``k_j`` tokens of largest score ``W0 h_j``.  Then ``h_j`` is
    projected onto ``{h : (w_z - w_z')^T h = 0 for z, z' in S_j}``, so the
    in-support scores tie (the equalities (4a) of the NTP-SVM, Thrampoulidis
    2024, hold for ``W0``), and the context is redrawn unless every
    out-of-support score lies ``margin`` below them; so ``W0 / margin`` is
    feasible for (4a)-(4b) and the data are NTP-separable.  The supports are
    top-k sets of random scores, so no two tokens share a support column
    (unlike the token groups of a grouped recipe, which
    :func:`skntp.svm.exchangeable_tokens` merges): the NTP-SVM keeps all
    ``n_tokens`` positions per context, as on real next-token data.

    Parameters
    ----------
    n_contexts : int, default=1000
    n_features : int, default=256
    n_tokens : int, default=500
    max_support : int, default=5
    margin : float, default=0.05
        Smallest gap between the tied in-support score and any other score
        under ``W0``.
    random_state : int, RandomState instance or None

    Returns
    -------
    Bunch
        ``contexts`` (n_contexts, n_features), ``support`` (n_contexts,
        n_tokens) bool and ``teacher`` (n_tokens, n_features), ``W0``.
    """
    if not 1 <= max_support < n_tokens:
        raise ValueError(f"max_support must lie in [1, n_tokens), got {max_support}.")
    rng = check_random_state(random_state)
    W0 = rng.standard_normal((n_tokens, n_features))
    W0 /= np.linalg.norm(W0, axis=1, keepdims=True)
    contexts, supports = [], []
    need = n_contexts
    while need > 0:
        n = int(need * 1.6) + 16
        H = rng.standard_normal((n, n_features))
        k = rng.randint(1, max_support + 1, size=n)
        order = np.argsort(-(H @ W0.T), axis=1)[:, :max_support]
        S = np.zeros((n, n_tokens), dtype=bool)
        ranks = np.arange(max_support)[None, :] < k[:, None]
        S[np.nonzero(ranks)[0], order[ranks]] = True
        for kk in range(2, max_support + 1):  # tie the in-support scores
            idx = np.flatnonzero(k == kk)
            if idx.size == 0:
                continue
            top = order[idx, :kk]
            D = W0[top[:, 1:]] - W0[top[:, :1]]
            coef = np.linalg.solve(D @ D.transpose(0, 2, 1),
                                   np.einsum("nkd,nd->nk", D, H[idx])[..., None])
            H[idx] -= np.einsum("nkd,nk->nd", D, coef[..., 0])
        s = H @ W0.T
        lo = np.where(S, s, np.inf).min(axis=1)
        spread = np.where(S, s, -np.inf).max(axis=1) - lo
        out = np.where(S, -np.inf, s).max(axis=1)
        ok = (lo - out >= margin) & (spread <= 1e-9 * (1.0 + np.abs(lo)))
        take = np.flatnonzero(ok)[:need]
        contexts.append(H[take])
        supports.append(S[take])
        need -= take.size
    return Bunch(contexts=np.vstack(contexts), support=np.vstack(supports), teacher=W0)
