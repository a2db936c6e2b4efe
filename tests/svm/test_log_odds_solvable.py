"""``log_odds_solvable``: NTP_H-compatibility (Def. 3.1) by one constant per context,
against the rank of the log-odds equations (3) written here from the paper."""

import numpy as np
import pytest
from helpers import log_odds_equations, word_contexts

from skntp.svm import log_odds_solvable


def _solvable(H, P):
    """Least squares on the dense equations: a relative residual of 1e-8 (the
    instances here are solvable exactly or miss by more than 1e-3)."""
    A, b = log_odds_equations(H, P)
    if A.shape[0] == 0:
        return True
    x = np.linalg.lstsq(A, b, rcond=None)[0]
    residual = np.linalg.norm(A @ x - b) / max(1.0, np.linalg.norm(b))
    assert residual <= 1e-10 or residual >= 1e-3
    return bool(residual <= 1e-8)


def _probs(rng, m, V, max_support=3):
    P = np.zeros((m, V))
    for j in range(m):
        S = rng.choice(V, rng.integers(1, max_support + 1), replace=False)
        P[j, S] = rng.random(S.size) + 0.1
    return P / P.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("seed", range(6))
def test_the_verdict_is_the_rank_test_of_the_equations(seed):
    rng = np.random.default_rng(seed)
    m, V = 14, 5
    d = [3, 6, 20][seed % 3]  # dependent contexts, then independent ones (d >= m)
    H = rng.standard_normal((m, d))
    P = _probs(rng, m, V)
    verdict, residual = log_odds_solvable(H, P)
    assert verdict is _solvable(H, P)
    assert (residual <= 1e-8) is verdict
    if d >= m:
        assert verdict is True


@pytest.mark.parametrize("seed", range(4))
def test_probabilities_of_a_softmax_are_compatible_on_dependent_contexts(seed):
    # p_j = softmax(W0 h_j) restricted to S_j and renormalized solves (3) with W = W0,
    # whatever the contexts' dependencies (word contexts: cycles, and more contexts
    # than dimensions); moving one probability breaks it
    H, S = word_contexts(seed, n_words=(5, 6), widths=(2, 2), n_contexts=25, V=6,
                         max_support=3)
    rng = np.random.default_rng(seed)
    logits = H @ rng.standard_normal((6, H.shape[1])).T
    P = np.where(S, np.exp(logits - logits.max(axis=1, keepdims=True)), 0.0)
    P /= P.sum(axis=1, keepdims=True)
    assert _solvable(H, P)
    verdict, residual = log_odds_solvable(H, P)
    assert verdict is True and residual <= 1e-10
    j = np.flatnonzero(S.sum(axis=1) >= 2)
    moved = P.copy()
    for k in j:
        z = np.flatnonzero(S[k])[0]
        moved[k, z] *= 1.0 + rng.random()
    moved /= moved.sum(axis=1, keepdims=True)
    assert log_odds_solvable(H, moved)[0] is False and not _solvable(H, moved)


def test_a_zero_context_needs_equal_probabilities():
    H = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]])
    P = np.array([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [1.0, 0.0, 0.0]])
    assert log_odds_solvable(H, P) == (True, 0.0) or log_odds_solvable(H, P)[0] is True
    P[0] = [0.3, 0.7, 0.0]
    verdict, residual = log_odds_solvable(H, P)
    assert verdict is False and residual > 0.1
    assert not _solvable(H, P)


def test_single_token_supports_carry_no_equation():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((30, 2))
    P = np.eye(4)[rng.integers(0, 4, 30)]
    assert log_odds_solvable(H, P) == (True, 0.0)


def test_a_solution_through_a_weak_direction_is_unknown():
    # h3 = h1 + h2 + 1e-10 e3 after tokens 0 and 1: their log-odds must add up, or be
    # met through the 1e-10 direction by a W of about 1e10 times them: "unknown"
    H = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1e-10], [0.0, 0.0, 1.0]])
    P = np.array([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0], [0.3, 0.7, 0.0], [0.0, 0.0, 1.0]])
    assert log_odds_solvable(H, P)[0] is None
    # log-odds that add up need no weak direction: compatible
    P[2] = [0.2, 0.8, 0.0]
    verdict, residual = log_odds_solvable(H, P)
    assert verdict is True and residual <= 1e-12
    # and without the weak direction, log-odds that do not add up are incompatible
    H[2, 2] = 0.0
    P[2] = [0.3, 0.7, 0.0]
    assert log_odds_solvable(H, P)[0] is False
    assert not _solvable(H, P)


def test_sparse_and_dense_probabilities_agree_and_bad_input_is_refused():
    import scipy.sparse as sp

    rng = np.random.default_rng(3)
    H = rng.standard_normal((12, 3))
    P = _probs(rng, 12, 4)
    assert log_odds_solvable(H, sp.csr_matrix(P)) == log_odds_solvable(H, P)
    assert log_odds_solvable(H, 7.0 * P) == log_odds_solvable(H, P)  # (normalized)
    with pytest.raises(ValueError, match="non-negative"):
        log_odds_solvable(H, -P)
    with pytest.raises(ValueError, match="positive entry"):
        log_odds_solvable(H, np.zeros_like(P))
    with pytest.raises(ValueError):
        log_odds_solvable(H[:5], P)
