"""Exact Farkas tables from rectangles of contexts (skntp/svm/_ntp_rectangles.py),
against an independent linear program of the separable rows written here from the
definitions (the recession cone of the loss (2), Thrampoulidis 2024, Def. 3.2)."""

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import lp_separable, word_contexts

from skntp.svm import (
    NotSeparableError,
    RectangleCertificate,
    check_rectangle_certificate,
    ntp_svm_problem,
    rectangle_certificate,
    solve_max_margin,
    spanning_proof,
)


@pytest.mark.parametrize("shape", [{}, {"widths": (6, 6), "n_contexts": 20, "V": 4}])
@pytest.mark.parametrize("seed", range(8))
def test_every_certified_row_is_not_separable_by_the_linear_program(seed, shape):
    # (widths 3: words of rank 3, most rows not separable; widths 6: independent words,
    # about half the rows separable)
    H, S = word_contexts(seed, **shape)
    certificate = rectangle_certificate(H, S)
    rows = check_rectangle_certificate(H, S, certificate)
    separable = lp_separable(H, S)
    assert not (rows & separable).any()
    assert not (rows & S).any()
    # the certificate as found is the certificate as checked: every row it found holds
    found = np.zeros_like(S)
    j, (p, q) = certificate.contexts, certificate.tokens.T
    for k, v in ((0, q), (1, q), (2, p), (3, p)):
        found[j[:, k], v] = True
    assert np.array_equal(rows, found & ~S)


def test_the_rectangles_certify_rows_and_chain_rounds():
    # (not vacuous: over the instances above, rows are certified, some of them in a
    # round after the first, i.e. with supports grown by earlier rounds)
    counts, rounds = [], []
    for seed in range(12):
        H, S = word_contexts(seed)
        certificate = rectangle_certificate(H, S)
        counts.append(check_rectangle_certificate(H, S, certificate).sum())
        rounds.append(certificate.n_rounds)
    assert sum(c > 0 for c in counts) >= 8
    assert max(rounds) >= 2


def test_a_planted_rectangle_and_its_chain():
    # words a, b, c (first) and r, r', r'' (second): p follows (a, r) and (b, r'), q
    # follows (b, r) and (a, r'); the rectangle (a, r), (c, r''), (c, r), (a, r'') has a
    # token in the supports of both diagonals only once q is tied at the top of (a, r)
    first = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # a, b, c
    second = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])  # r, r', r''
    pairs = [(0, 0), (1, 1), (1, 0), (0, 1), (2, 0), (2, 2), (0, 2)]
    H = np.array([np.r_[first[x], second[y]] for x, y in pairs])
    V = 4  # p = 0, q = 1, t = 2, u = 3
    S = np.zeros((7, V), dtype=bool)
    S[0, 0] = S[1, 0] = True          # p after (a, r), (b, r')
    S[2, 1] = S[3, 1] = True          # q after (b, r), (a, r')
    S[4, 2] = True                    # t after (c, r)
    S[5, 1] = True                    # q after (c, r'')
    S[6, 2] = True                    # t after (a, r'')
    certificate = rectangle_certificate(H, S)
    rows = check_rectangle_certificate(H, S, certificate)
    # round 0: the rectangle (a,r),(b,r'),(b,r),(a,r') with p, q
    expected = np.zeros_like(S)
    expected[0, 1] = expected[1, 1] = expected[2, 0] = expected[3, 0] = True
    # round 1: (c, r), (a, r'') against (a, r), (c, r''): q is now tied at (a, r),
    # and t follows (c, r) and (a, r''), q follows (c, r'')
    expected[4, 1] = expected[6, 1] = True
    expected[0, 2] = expected[5, 2] = True
    assert np.array_equal(rows, expected)
    assert certificate.n_rounds == 2
    assert not (rows & lp_separable(H, S)).any()
    # each round alone: the second needs the first's rows
    late = certificate.rounds == 1
    alone = RectangleCertificate(certificate.contexts[late], certificate.tokens[late],
                                 np.zeros(late.sum(), dtype=int))
    assert not check_rectangle_certificate(H, S, alone).any()


@pytest.mark.parametrize("seed", range(4))
def test_three_positions(seed):
    H, S = word_contexts(seed, n_words=(4, 3, 3), widths=(2, 2, 2), n_contexts=30, V=4)
    certificate = rectangle_certificate(H, S)
    rows = check_rectangle_certificate(H, S, certificate)
    assert not (rows & lp_separable(H, S)).any()


def test_three_positions_certify_rows():
    assert any(check_rectangle_certificate(*hs, rectangle_certificate(*hs)).any()
               for hs in (word_contexts(s, n_words=(4, 3, 3), widths=(2, 2, 2),
                                        n_contexts=30, V=4) for s in range(4)))


def test_a_tampered_certificate_certifies_nothing_it_cannot_prove():
    H, S = word_contexts(3)
    certificate = rectangle_certificate(H, S)
    rows = check_rectangle_certificate(H, S, certificate)
    assert rows.any()
    # one unit of roundoff in one coordinate of a context of every round-0 table
    # breaks their identities exactly
    moved = H.copy()
    j = certificate.contexts[0, 0]
    moved[j, 0] = np.nextafter(moved[j, 0], np.inf)
    broken = check_rectangle_certificate(moved, S, certificate)
    assert not broken[j].any() or broken.sum() < rows.sum()
    assert (broken <= rows).all()
    # a table whose token is not in the supports it needs
    bad = RectangleCertificate(certificate.contexts[:1],
                               certificate.tokens[:1, ::-1].copy(), np.zeros(1, int))
    first = certificate.contexts[0]
    if not (S[first[0], bad.tokens[0, 0]] and S[first[1], bad.tokens[0, 0]]):
        assert not check_rectangle_certificate(H, S, bad).any()
    # repeated contexts cancel: no table
    same = RectangleCertificate(np.array([[0, 1, 0, 1]]), np.array([[0, 1]]),
                                np.zeros(1, int))
    assert not check_rectangle_certificate(H, S, same).any()
    # later rounds placed first lose the rows of the rounds they need
    flipped = RectangleCertificate(certificate.contexts, certificate.tokens,
                                   certificate.n_rounds - 1 - certificate.rounds)
    if certificate.n_rounds > 1:
        assert check_rectangle_certificate(H, S, flipped).sum() < rows.sum()
    # malformed
    assert not check_rectangle_certificate(
        H, S, RectangleCertificate(np.array([[0, 1, 2, 99]]), np.array([[0, 1]]),
                                   np.zeros(1, int))).any()


def test_units_do_not_change_the_rows():
    # equal values stay equal under any elementwise rounding: the same rows certified
    H, S = word_contexts(5)
    rows = check_rectangle_certificate(H, S, rectangle_certificate(H, S))
    assert rows.any()
    for unit in (1e-9, 3.7, 1e12):
        Hs = H * unit
        assert np.array_equal(check_rectangle_certificate(Hs, S, rectangle_certificate(Hs, S)),
                              rows)


def test_sparse_supports_and_probabilities():
    H, S = word_contexts(2)
    P = S / S.sum(axis=1, keepdims=True)
    dense = check_rectangle_certificate(H, S, rectangle_certificate(H, S))
    for support in (sp.csr_matrix(P), P, sp.csc_matrix(S)):
        found = rectangle_certificate(H, support)
        assert np.array_equal(check_rectangle_certificate(H, support, found), dense)


def test_generic_contexts_have_no_rectangle():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((40, 6))
    S = rng.random((40, 5)) < 0.3
    S[np.arange(40), rng.integers(0, 5, 40)] = True
    certificate = rectangle_certificate(H, S)
    assert len(certificate) == 0 and certificate.n_rounds == 0
    assert not check_rectangle_certificate(H, S, certificate).any()


def test_the_first_rectangles_are_kept_above_the_cap():
    H, S = word_contexts(4)
    full = check_rectangle_certificate(H, S, rectangle_certificate(H, S))
    capped = check_rectangle_certificate(H, S, rectangle_certificate(H, S, max_rectangles=3))
    assert (capped <= full).all() and capped.sum() < full.sum()


def test_the_ntp_svm_is_refused_by_its_rectangles_before_any_method():
    # not spanning, and the rectangles' first round is the program's own proof: the
    # dispatcher checks it from the program's rows before any method runs
    H, S = word_contexts(1)
    assert not spanning_proof(H, S)
    problem = ntp_svm_problem(H, S)
    with pytest.raises(NotSeparableError) as info:
        solve_max_margin(problem, method="dcd", max_iter=1)
    result = info.value.result
    assert result.status == "infeasible"
    assert "rectangles of contexts" in str(info.value) and result.margin_bound <= 1e-13
    lam = result.dual
    c = problem.constraints
    assert np.all(lam[~c.equality] >= 0) and c.rhs @ lam > 0


def test_bad_input_is_an_error():
    H, S = word_contexts(3)
    certificate = rectangle_certificate(H, S)
    moved = H.copy()
    moved[certificate.contexts[0, 0], 0] = np.inf
    for bad in (moved, H[:-1]):
        with pytest.raises(ValueError):
            rectangle_certificate(bad, S)
        with pytest.raises(ValueError):
            check_rectangle_certificate(bad, S, certificate)


def test_sparse_entries_that_cancel_are_not_in_the_support():
    # a stored +1 and -1 at (1, 0): support[1, 0] == 0, so token 0 is not in S_1 (before,
    # each stored entry was cast to bool and four separable rows were certified)
    H = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1], [0, 1, 1, 0], [1, 0, 0, 1]])
    S = sp.csr_matrix((np.array([1.0, 1, 1, -1, 1, 1]), np.array([0, 2, 0, 0, 1, 1]),
                       np.array([0, 1, 4, 5, 6])), shape=(4, 3))
    assert S[1, 0] == 0
    from skntp.svm._ntp_partial import support_mask

    np.testing.assert_array_equal(support_mask(S), S.toarray() != 0)
    for support in (S, sp.csc_matrix(S)):
        assert not check_rectangle_certificate(H, support,
                                               rectangle_certificate(H, support)).any()
    assert not check_rectangle_certificate(
        H, S, RectangleCertificate(np.array([[0, 1, 2, 3]]), np.array([[0, 1]]),
                                   np.zeros(1, int))).any()


def test_duplicate_contexts_give_only_tables_the_check_accepts():
    H, S = word_contexts(7)
    H = np.vstack([H, H[:3]])
    S = np.vstack([S, np.roll(S[:3], 1, axis=1)])
    certificate = rectangle_certificate(H, S)
    j = certificate.contexts
    assert all(len(set(row)) == 4 for row in j.tolist())
    found = np.zeros_like(S)
    p, q = certificate.tokens.T
    for k, v in ((0, q), (1, q), (2, p), (3, p)):
        found[j[:, k], v] = True
    np.testing.assert_array_equal(check_rectangle_certificate(H, S, certificate), found & ~S)


@pytest.mark.parametrize("shape", [(2, 40), (40, 2)])
def test_the_cap_keeps_the_first_rectangles_of_a_large_group(shape):
    # every pair of words: one group of wedges far above the cap; the first ones kept,
    # whichever position has the many words
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((shape[0], 3)), rng.standard_normal((shape[1], 3))
    pairs = np.array([(x, y) for x in range(shape[0]) for y in range(shape[1])])
    H = np.hstack([a[pairs[:, 0]], b[pairs[:, 1]]])
    S = np.zeros((len(H), 3), dtype=bool)
    S[np.arange(len(H)), rng.integers(0, 3, len(H))] = True
    full = rectangle_certificate(H, S, max_rounds=1)
    capped = rectangle_certificate(H, S, max_rounds=1, max_rectangles=200)
    assert 0 < len(capped) < len(full)
    rows = check_rectangle_certificate(H, S, capped)
    assert rows.any() and (rows <= check_rectangle_certificate(H, S, full)).all()
