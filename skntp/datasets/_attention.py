"""Data recipes of "Max-Margin Token Selection in Attention Mechanism".

The single-input examples of Fig. 1(a)/(b), the multi-input example of
Fig. 1(c), the two-input counter-example of Fig. 8 (App. E) and the random
recipe of Fig. 9 (App. E).  The paper does not list every coordinate of its
figures; where it does not, the functions below build instances with the
properties the figures illustrate (stated in each docstring and checked in
the tests).

Every figure example returns a :class:`~sklearn.utils.Bunch` with

* ``X`` (n, T, d) tokens and ``y`` (n,) labels in ``{-1, +1}``;
* ``head`` (d,) the fixed ``v`` and ``key_query`` (k, d) the fixed ``W``,
  ready for ``AttentionSelector(head=..., key_query=...)``;
* ``K`` (n, T, k), the keys ``X W^T`` and ``scores`` (n, T) ``= Y_i v^T x_it``
  (Def. 1);
* ``starts``: named initial queries ``p(0)`` (``init``) and
  ``expected``: the token indices ``alpha`` GD started there selects.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import Bunch
from sklearn.utils.validation import check_random_state

__all__ = [
    "make_attention_fig1a",
    "make_attention_fig1b",
    "make_attention_fig1c",
    "make_attention_fig8",
    "make_attention_random",
]


def _bunch(X, y, head, key_query, starts, expected, description):
    X = np.asarray(X, dtype=float)
    y = np.asarray(y, dtype=float)
    head = np.asarray(head, dtype=float)
    key_query = np.asarray(key_query, dtype=float)
    keys = X @ key_query.T
    scores = y[:, None] * (X @ head)
    return Bunch(X=X, y=y, head=head, key_query=key_query, K=keys, scores=scores,
                 starts={k: np.asarray(v, dtype=float) for k, v in starts.items()},
                 expected={k: np.asarray(v) for k, v in expected.items()},
                 description=description)


_W3 = np.diag([1.0, 1.0, 0.0])
_V3 = np.array([0.0, 0.0, 1.0])


def make_attention_fig1a():
    """Fig. 1(a): one input, a globally optimal token (Thm. 2).

    ``d = 3``, ``W = diag(1, 1, 0)`` so the keys are the first two
    coordinates (the token positions in the figure) and ``v = e_3`` so the
    score is ``Y x_3`` (Sec. 2.1).  Keys ``(0, 0)`` and ``(1, 0)`` are
    non-optimal (score 0, Assumption B), ``(-0.1, 1)`` is optimal (score 1).
    By Thm. 2 (``n = 1``) GD converges to ``p^mm*`` from any start.

    Returns
    -------
    Bunch
        See the module docstring; ``starts`` holds four starts around the
        circle, all expected to select token 2.
    """
    X = np.array([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [-0.1, 1.0, 1.0]]])
    angles = np.linspace(0, 2 * np.pi, 4, endpoint=False) + 0.3
    starts = {f"angle_{a:.2f}": [np.cos(a), np.sin(a), 0.0] for a in angles}
    expected = {k: [2] for k in starts}
    return _bunch(X, [1.0], _V3, _W3, starts, expected,
                  "Fig. 1(a): n=1, T=3, GMM from any start (Thm. 2)")


def make_attention_fig1b():
    """Fig. 1(b): one input with a locally optimal token (Thm. 3).

    Same construction as :func:`make_attention_fig1a`.  Keys ``(0, 0)``
    (score 0, non-optimal), ``(1, 0)`` (score 1, locally optimal: its only
    SVM-neighbor is ``(0, 0)``, whose score is lower) and ``(-0.5, 1)``
    (score 2, globally optimal).  ``p^mm`` of the locally optimal token is
    ``(1, 0, 0)`` (LMM); ``p^mm*`` separates ``(-0.5, 1)`` (GMM).  GD started
    in the cone around the LMM direction (``starts["lmm"]``) stays there
    (Thm. 3); started near the GMM direction it converges to the GMM.

    Returns
    -------
    Bunch
    """
    X = np.array([[[0.0, 0.0, 0.0], [1.0, 0.0, 1.0], [-0.5, 1.0, 2.0]]])
    starts = {"lmm": [3.0, 0.0, 0.0], "gmm": [-1.0, 2.0, 0.0]}
    expected = {"lmm": [1], "gmm": [2]}
    return _bunch(X, [1.0], _V3, _W3, starts, expected,
                  "Fig. 1(b): n=1, T=3, an LMM and the GMM (Thm. 3)")


def make_attention_fig1c():
    """Fig. 1(c): several inputs, GD reaches the GMM from several starts.

    Same construction as :func:`make_attention_fig1a`, ``n = 3`` inputs of
    ``T = 3`` tokens sharing the non-optimal key ``(0, 0)``, one more
    non-optimal key each, and an optimal token (score 1; non-optimal
    scores 0, Assumption B).  All optimal tokens are strictly separable from
    the others, and the non-optimal keys lie far from the GMM cone, so GD
    from the given starts selects the optimal tokens.

    Returns
    -------
    Bunch
    """
    X = np.array([
        [[0.0, 0.0, 0.0], [-1.0, 0.2, 0.0], [1.0, 0.6, 1.0]],
        [[0.0, 0.0, 0.0], [0.3, -1.0, 0.0], [0.6, 1.0, 1.0]],
        [[0.0, 0.0, 0.0], [-0.6, -0.8, 0.0], [1.2, 1.2, 1.0]],
    ])
    angles = [0.2, 1.2, 2.5, 4.5]
    starts = {f"angle_{a:.2f}": [np.cos(a), np.sin(a), 0.0] for a in angles}
    expected = {k: [2, 2, 2] for k in starts}
    return _bunch(X, [1.0, 1.0, 1.0], _V3, _W3, starts, expected,
                  "Fig. 1(c): n=3, T=3, GMM from several starts")


def make_attention_fig8():
    """Fig. 8 (App. E): two inputs where GD reaches the GMM or an LMM.

    ``n = T = d = 2``, ``W = I``, ``v = (1, 1)/sqrt(2)``, logistic loss.
    Input 1 has keys ``(1, 0)`` (optimal) and ``(0, 0)``; input 2 (label
    ``-1``) has keys ``(-1.5, 0.5)`` (optimal) and ``(0.5, -0.5)``.
    Assumption B holds (one non-optimal token per input).  The GMM
    direction separates both optimal tokens: ``p^mm* = (1, 3)``.  Selecting
    the *non-optimal* token of input 2 is locally optimal: at its
    ``p^mm = (1, 0)`` that token has no SVM-neighbor (its constraint is
    inactive), so Def. 2 holds vacuously.  GD started along ``(1, 0)``
    converges to this LMM, started along ``(1, 3)`` to the GMM: ``n = 1`` is
    needed in Thm. 2.

    Returns
    -------
    Bunch
    """
    X = np.array([
        [[1.0, 0.0], [0.0, 0.0]],
        [[-1.5, 0.5], [0.5, -0.5]],
    ])
    starts = {"lmm": [2.0, 0.0], "gmm": [1.0, 3.0]}
    expected = {"lmm": [0, 1], "gmm": [0, 0]}
    return _bunch(X, [1.0, -1.0], np.array([1.0, 1.0]) / np.sqrt(2), np.eye(2), starts,
                  expected, "Fig. 8: n=T=d=2, GMM or LMM depending on the start")


def _sphere(rng, shape):
    z = rng.standard_normal(shape)
    return z / np.linalg.norm(z, axis=-1, keepdims=True)


def make_attention_random(n_samples=4, seq_len=6, n_features=10, *, n_trials=None,
                          random_state=None):
    """The random recipe of Fig. 9 (App. E).

    Tokens ``x_it`` and the head ``v`` uniform on the unit sphere of
    ``R^d``, labels ``Y_i`` uniform on ``{-1, +1}``, ``W = I``.

    Parameters
    ----------
    n_samples : int, default=4
        ``n`` (the paper uses 4).
    seq_len : int, default=6
        ``T`` (the paper uses 6).
    n_features : int, default=10
        ``d`` (the paper sweeps 2, 5, 10, 100, 300, 500).
    n_trials : int or None, default=None
        ``None`` for one instance; an int adds a leading trial axis.
    random_state : int, RandomState instance or None

    Returns
    -------
    X : ndarray of shape ([n_trials,] n, T, d)
    y : ndarray of shape ([n_trials,] n)
    head : ndarray of shape ([n_trials,] d)
    """
    rng = check_random_state(random_state)
    lead = () if n_trials is None else (int(n_trials),)
    X = _sphere(rng, lead + (n_samples, seq_len, n_features))
    head = _sphere(rng, lead + (n_features,))
    y = rng.choice(np.array([-1.0, 1.0]), size=lead + (n_samples,))
    return X, y, head


def make_key_query_data(n_samples=6, seq_len=8, n_features=10, *, attention="cross",
                        random_state=None):
    """The setup of "Transformers as Support Vector Machines" (public code), one query each.

    Tokens ``x_it``, queries ``z_i`` and the head ``v`` uniform on the unit
    sphere of ``R^d``, labels ``Y_i`` uniform on ``{-1, +1}``; the optimal
    token of input ``i`` is ``argmax_t Y_i v^T x_it``.  For
    :class:`~skntp.KeyQuerySelector` (per-input queries).

    Parameters
    ----------
    n_samples, seq_len, n_features : int, default=6, 8, 10
        ``n``, ``T`` and ``d`` (the paper's convergence figure).
    attention : {"cross", "self"}, default="cross"
        ``"cross"``: ``X`` holds each input's query as an extra last row (fit
        with ``query_index="extra-row"``), shape ``(n, T + 1, d)``.
        ``"self"``: the query is the input's first token (``query_index=0``),
        ``X`` of shape ``(n, T, d)``.
    random_state : int, RandomState instance or None

    Returns
    -------
    Bunch
        ``X``, ``y``, ``head``, ``tokens`` (``(n, T, d)``), ``queries``
        (``(n, d)``), ``optimal`` (the optimal token of every input),
        ``query_index`` (the value to fit with).
    """
    if attention not in ("cross", "self"):
        raise ValueError(f"attention must be 'cross' or 'self', got {attention!r}.")
    rng = check_random_state(random_state)
    tokens = _sphere(rng, (n_samples, seq_len, n_features))
    head = _sphere(rng, (n_features,))
    y = rng.choice(np.array([-1.0, 1.0]), size=n_samples)
    if attention == "cross":
        queries = _sphere(rng, (n_samples, n_features))
        X, query_index = np.concatenate([tokens, queries[:, None]], axis=1), "extra-row"
    else:
        queries, X, query_index = tokens[:, 0].copy(), tokens, 0
    optimal = np.argmax(y[:, None] * (tokens @ head), axis=1)
    return Bunch(X=X, y=y, head=head, tokens=tokens, queries=queries, optimal=optimal,
                 query_index=query_index,
                 description=f"Transformers as SVMs, {attention}-attention: n={n_samples}, "
                             f"T={seq_len}, d={n_features}")
