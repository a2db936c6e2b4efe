"""Exact Farkas tables from closed walks of contexts (skntp/svm/_ntp_cycles.py), against
an independent linear program of the separable rows written from the definitions (the
recession cone of the loss (2), Thrampoulidis 2024, Def. 3.2)."""

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import lp_separable, word_contexts

from skntp.svm import (
    CycleCertificate,
    NotSeparableError,
    check_cycle_certificate,
    cycle_certificate,
    ntp_svm_problem,
    solve_max_margin,
    spanning_proof,
)


def _rows_of(certificate, S):
    """The rows the walks prove, read off the certificate as found (q after the even
    positions, p after the odd ones), off the data's supports."""
    found = np.zeros_like(S)
    for i in range(len(certificate)):
        walk = certificate.contexts[certificate.offsets[i]:certificate.offsets[i + 1]]
        p, q = certificate.tokens[i]
        found[walk[0::2], q] = True
        found[walk[1::2], p] = True
    return found & ~S


@pytest.mark.parametrize("shape", [{}, {"widths": (6, 6), "n_contexts": 20, "V": 4}])
@pytest.mark.parametrize("seed", range(8))
def test_every_certified_row_is_not_separable_by_the_linear_program(seed, shape):
    H, S = word_contexts(seed, **shape)
    certificate = cycle_certificate(H, S)
    rows = check_cycle_certificate(H, S, certificate)
    separable = lp_separable(H, S)
    assert rows.any()
    assert not (rows & separable).any()
    assert not (rows & S).any()
    # as found is as checked
    assert np.array_equal(rows, _rows_of(certificate, S))
    # the tables: integer, image exactly zero, rows summing to zero, and no positive
    # entry off the supports of their round
    for k in range(certificate.n_rounds):
        T = certificate.table(S.shape, of_round=k).toarray()
        np.testing.assert_allclose(T.T @ H, 0.0, atol=1e-12 * np.abs(H).max())
        np.testing.assert_array_equal(T.sum(axis=1), 0.0)
        earlier = CycleCertificate(certificate.contexts, certificate.offsets,
                                   certificate.tokens, np.where(certificate.rounds < k,
                                                                certificate.rounds, 10**6))
        grown = S | (check_cycle_certificate(H, S, earlier) if k else False)
        assert (T[~grown] <= 0).all()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("V", [2, 4])
def test_with_independent_word_vectors_the_cycles_are_the_whole_non_separable_side(seed, V):
    # 6 words of dimension 6 per position: the contexts' only dependencies are the
    # cycles of the word-pair graph.  With two tokens the cone is a system of difference
    # constraints on the words' logits, infeasible exactly on the cycles; with four,
    # measured on these instances
    H, S = word_contexts(seed, widths=(6, 6), n_contexts=20, V=V)
    rows = check_cycle_certificate(H, S, cycle_certificate(H, S))
    np.testing.assert_array_equal(rows, ~S & ~lp_separable(H, S))


def test_a_planted_hexagon_that_no_rectangle_proves():
    # words a, b, c (first) and r, s, t (second); p follows (a, r), (b, s), (c, t) and q
    # follows (b, r), (c, s), (a, t): the walk a->r->b->s->c->t->a, of six contexts
    rng = np.random.default_rng(0)
    first, second = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    pairs = [(0, 0), (1, 1), (2, 2), (1, 0), (2, 1), (0, 2)]
    H = np.array([np.r_[first[x], second[y]] for x, y in pairs])
    S = np.zeros((6, 2), dtype=bool)
    S[:3, 0] = True
    S[3:, 1] = True
    certificate = cycle_certificate(H, S)
    rows = check_cycle_certificate(H, S, certificate)
    np.testing.assert_array_equal(rows, ~S)
    np.testing.assert_array_equal(rows, ~S & ~lp_separable(H, S))
    assert set(certificate.lengths()) == {6}
    # any context moved by one unit of roundoff breaks the identity exactly
    moved = H.copy()
    moved[4, 5] = np.nextafter(moved[4, 5], np.inf)
    assert not check_cycle_certificate(moved, S, certificate).any()


def test_a_chain_of_rounds():
    # the rectangle (a, r), (b, r'), (b, r), (a, r') with p, q, then, once q is tied
    # at the top of (a, r), the rectangle (c, r), (a, r''), (a, r), (c, r'') with t, q
    first = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # a, b, c
    second = np.array([[1.0, 2.0], [3.0, -1.0], [0.5, 0.5]])  # r, r', r''
    pairs = [(0, 0), (1, 1), (1, 0), (0, 1), (2, 0), (2, 2), (0, 2)]
    H = np.array([np.r_[first[x], second[y]] for x, y in pairs])
    S = np.zeros((7, 4), dtype=bool)
    S[0, 0] = S[1, 0] = True
    S[2, 1] = S[3, 1] = True
    S[4, 2] = True
    S[5, 1] = True
    S[6, 2] = True
    certificate = cycle_certificate(H, S)
    rows = check_cycle_certificate(H, S, certificate)
    expected = np.zeros_like(S)
    expected[0, 1] = expected[1, 1] = expected[2, 0] = expected[3, 0] = True
    expected[4, 1] = expected[6, 1] = expected[0, 2] = expected[5, 2] = True
    np.testing.assert_array_equal(rows, expected)
    assert certificate.n_rounds == 2
    # the second round alone proves nothing: it needs the first's rows
    late = certificate.rounds == 1
    walks = np.flatnonzero(late)
    starts, ends = certificate.offsets[walks], certificate.offsets[walks + 1]
    contexts = np.concatenate([certificate.contexts[a:b] for a, b in zip(starts, ends)])
    alone = CycleCertificate(contexts, np.r_[0, np.cumsum(ends - starts)],
                             certificate.tokens[late], np.zeros(late.sum(), dtype=int))
    assert not check_cycle_certificate(H, S, alone).any()


@pytest.mark.parametrize("seed", range(4))
def test_three_positions(seed):
    H, S = word_contexts(seed, n_words=(4, 3, 3), widths=(2, 2, 2), n_contexts=30, V=4)
    certificate = cycle_certificate(H, S)
    rows = check_cycle_certificate(H, S, certificate)
    assert not (rows & lp_separable(H, S)).any()
    assert rows.any() or seed  # (seed 0 certifies rows: not vacuous)


def test_batches_sparse_lookups_and_every_pair_each_round_give_the_same_rows(monkeypatch):
    # (after the first round only the pairs the new rows can change are rebuilt; all of
    # them, each round, give the same rows)
    from skntp.svm import _ntp_cycles

    for seed in range(6):
        H, S = word_contexts(seed)
        rows = check_cycle_certificate(H, S, cycle_certificate(H, S))
        assert rows.any()
        for size in (1, 7):
            small = cycle_certificate(H, S, edges_per_chunk=size)
            np.testing.assert_array_equal(check_cycle_certificate(H, S, small), rows)
        with monkeypatch.context() as patch:
            patch.setattr(_ntp_cycles, "MAX_DENSE_LABELS", 0)
            sparse = cycle_certificate(H, S)
        np.testing.assert_array_equal(check_cycle_certificate(H, S, sparse), rows)
        with monkeypatch.context() as patch:
            patch.setattr(_ntp_cycles, "_grown_pairs", lambda *args: None)
            every = cycle_certificate(H, S)
        np.testing.assert_array_equal(check_cycle_certificate(H, S, every), rows)


def test_a_tampered_certificate_certifies_nothing_it_cannot_prove():
    H, S = word_contexts(3)
    certificate = cycle_certificate(H, S)
    rows = check_cycle_certificate(H, S, certificate)
    assert rows.any()

    def only(i, **change):
        a, b = certificate.offsets[i], certificate.offsets[i + 1]
        parts = {"contexts": certificate.contexts[a:b], "offsets": np.array([0, b - a]),
                 "tokens": certificate.tokens[i:i + 1], "rounds": np.zeros(1, int)}
        parts.update(change)
        return CycleCertificate(**parts)

    first = np.flatnonzero(certificate.rounds == 0)[0]
    assert check_cycle_certificate(H, S, only(first)).any()
    walk = certificate.contexts[certificate.offsets[first]:certificate.offsets[first + 1]]
    # the tokens swapped: p is not in the supports of the + edges
    assert not check_cycle_certificate(H, S, only(first, tokens=certificate.tokens[
        first:first + 1, ::-1].copy())).any()
    # shifted by one: the signs of every edge flip
    assert not check_cycle_certificate(H, S, only(first, contexts=np.roll(walk, 1))).any()
    # a context left out: odd length
    assert not check_cycle_certificate(
        H, S, only(first, contexts=walk[:-1], offsets=np.array([0, walk.size - 1]))).any()
    # another context in place of one: no longer an identity
    other = np.setdiff1d(np.arange(len(H)), walk)[0]
    assert not check_cycle_certificate(
        H, S, only(first, contexts=np.r_[other, walk[1:]])).any()
    # a context out of range, inconsistent offsets, later rounds first
    assert not check_cycle_certificate(
        H, S, only(first, contexts=np.r_[walk[:-1], len(H)])).any()
    assert not check_cycle_certificate(
        H, S, only(first, offsets=np.array([0, walk.size + 2]))).any()
    if certificate.n_rounds > 1:
        flipped = CycleCertificate(certificate.contexts, certificate.offsets,
                                   certificate.tokens,
                                   certificate.n_rounds - 1 - certificate.rounds)
        assert check_cycle_certificate(H, S, flipped).sum() < rows.sum()


def test_units_and_sparse_supports_do_not_change_the_rows():
    H, S = word_contexts(5)
    rows = check_cycle_certificate(H, S, cycle_certificate(H, S))
    assert rows.any()
    for unit in (1e-9, 3.7, 1e12):
        Hs = H * unit
        np.testing.assert_array_equal(check_cycle_certificate(Hs, S, cycle_certificate(Hs, S)),
                                      rows)
    P = S / S.sum(axis=1, keepdims=True)
    for support in (sp.csr_matrix(P), P, sp.csc_matrix(S)):
        np.testing.assert_array_equal(
            check_cycle_certificate(H, support, cycle_certificate(H, support)), rows)


def test_duplicate_contexts_are_a_walk_of_two():
    # the same vector followed by p once and by q once: the two rows are tied
    H, S = word_contexts(7)
    H = np.vstack([H, H[:1]])
    S = np.vstack([S, np.zeros((1, S.shape[1]), dtype=bool)])
    p = np.flatnonzero(S[0])[0]
    q = (p + 1) % S.shape[1]
    S[-1, q] = True
    rows = check_cycle_certificate(H, S, cycle_certificate(H, S))
    assert rows[-1, p] and (rows[0, q] or S[0, q])
    assert not (rows & lp_separable(H, S)).any()


def test_the_rounds_stop_before_one_with_too_many_edges(caplog):
    H, S = word_contexts(0)
    full = cycle_certificate(H, S)
    assert full.n_rounds >= 2
    with caplog.at_level("INFO", logger="skntp.svm"):
        none = cycle_certificate(H, S, max_edges=0)
    assert len(none) == 0 and "above max_edges=0" in caplog.text
    rows = check_cycle_certificate(H, S, full)
    assert rows.any() and not check_cycle_certificate(H, S, none).any()


def test_generic_contexts_have_no_cycle():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((40, 6))
    S = rng.random((40, 5)) < 0.3
    S[np.arange(40), rng.integers(0, 5, 40)] = True
    certificate = cycle_certificate(H, S)
    assert len(certificate) == 0 and certificate.n_rounds == 0
    assert not check_cycle_certificate(H, S, certificate).any()


def test_bad_input_is_an_error():
    H, S = word_contexts(3)
    certificate = cycle_certificate(H, S)
    moved = H.copy()
    moved[0, 0] = np.nan
    for bad in (moved, H[:-1]):
        with pytest.raises(ValueError):
            cycle_certificate(bad, S)
        with pytest.raises(ValueError):
            check_cycle_certificate(bad, S, certificate)


def test_the_ntp_svm_is_refused_by_its_walks_before_any_method():
    # not spanning, and the walks' first round is the program's own proof: the
    # dispatcher checks it from the program's rows before any method runs
    H, S = word_contexts(1)
    assert not spanning_proof(H, S)
    problem = ntp_svm_problem(H, S)
    with pytest.raises(NotSeparableError) as info:
        solve_max_margin(problem, method="dcd", max_iter=1)
    result = info.value.result
    assert result.status == "infeasible"
    assert "closed walks of contexts" in str(info.value) and result.margin_bound <= 1e-13
    lam = result.dual
    c = problem.constraints
    assert np.all(lam[~c.equality] >= 0) and c.rhs @ lam > 0


def test_sparse_entries_that_cancel_are_not_in_the_support():
    # a stored +1 and -1 at (1, 0): support[1, 0] == 0, so token 0 is not in S_1 (cast
    # to bool entry by entry, four separable rows would be certified)
    H = np.array([[1.0, 0, 1, 0], [0, 1, 0, 1], [0, 1, 1, 0], [1, 0, 0, 1]])
    S = sp.csr_matrix((np.array([1.0, 1, 1, -1, 1, 1]), np.array([0, 2, 0, 0, 1, 1]),
                       np.array([0, 1, 4, 5, 6])), shape=(4, 3))
    assert S[1, 0] == 0
    for support in (S, sp.csc_matrix(S)):
        assert not check_cycle_certificate(H, support, cycle_certificate(H, support)).any()
    # the walk (0, 2, 1, 3) with p = 0, q = 1 needs token 0 after context 1
    assert not check_cycle_certificate(
        H, S, CycleCertificate(np.array([0, 2, 1, 3]), np.array([0, 4]),
                               np.array([[0, 1]]), np.zeros(1, int))).any()
