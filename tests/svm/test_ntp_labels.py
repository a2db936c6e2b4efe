"""Farkas tables from the program of the contexts' labels (skntp/svm/_ntp_labels.py),
against an independent linear program of the separable rows written from the
definitions (the recession cone of the loss (2), Thrampoulidis 2024, Def. 3.2)."""

import numpy as np
import pytest
import scipy.sparse as sp
from helpers import lp_separable, word_contexts

from skntp.svm import (
    LabelCertificate,
    check_cycle_certificate,
    check_label_certificate,
    cycle_certificate,
    label_certificate,
)


def _tables(certificate, shape):
    """Each round's dense table."""
    c = certificate
    out = []
    for k in range(c.n_rounds):
        T = np.zeros(shape)
        at = c.rounds == k
        np.add.at(T, (c.contexts[at], c.tokens[at]), c.values[at])
        out.append(T)
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("V", [3, 5])
def test_with_independent_word_vectors_the_program_is_the_whole_non_separable_side(seed, V):
    # 6 words of dimension 6 per position: the relaxation (one free logit per token and
    # word) is the recession cone itself, for any number of tokens
    H, S = word_contexts(seed, widths=(6, 6), n_contexts=20, V=V)
    rows = check_label_certificate(H, S, label_certificate(H, S))
    np.testing.assert_array_equal(rows, ~S & ~lp_separable(H, S))


def test_rows_that_no_cycle_proves():
    # five tokens: tables of three or more tokens, which no pair's walk gives
    H, S = word_contexts(3, widths=(6, 6), n_contexts=20, V=5)
    labels = check_label_certificate(H, S, label_certificate(H, S))
    cycles = check_cycle_certificate(H, S, cycle_certificate(H, S))
    assert not (cycles & ~labels).any()
    assert np.count_nonzero(labels & ~cycles) >= 5


@pytest.mark.parametrize("seed", range(8))
def test_every_row_certified_is_not_separable_with_dependent_word_vectors(seed):
    # 8 words of dimension 3 per position: the relaxation is strictly larger than the
    # cone, so the program proves some of the rows
    H, S = word_contexts(seed, n_words=(8, 8), widths=(3, 3), n_contexts=30, V=5)
    rows = check_label_certificate(H, S, label_certificate(H, S))
    assert not (rows & lp_separable(H, S)).any()
    assert rows.any()


def test_three_positions_and_the_tables():
    H, S = word_contexts(2, n_words=(4, 3, 3), widths=(4, 3, 3), n_contexts=30, V=4)
    certificate = label_certificate(H, S)
    rows = check_label_certificate(H, S, certificate)
    np.testing.assert_array_equal(rows, ~S & ~lp_separable(H, S))
    grown = S.copy()
    for T in _tables(certificate, S.shape):
        # image zero, rows summing to zero, no positive entry off that round's ties
        np.testing.assert_allclose(T.T @ H, 0.0, atol=1e-9)
        np.testing.assert_allclose(T.sum(axis=1), 0.0, atol=1e-9)
        assert (T[~grown] <= 1e-12).all()
        grown |= T < -1e-9


def test_equal_rows_are_held_as_ties_and_chain():
    H, S = word_contexts(4, widths=(6, 6), n_contexts=20, V=5)
    cycles = check_cycle_certificate(H, S, cycle_certificate(H, S))
    certificate = label_certificate(H, S, equal=cycles)
    rows = check_label_certificate(H, S, certificate, equal=cycles)
    np.testing.assert_array_equal(rows | cycles, ~S & ~lp_separable(H, S))
    assert not (rows & cycles).any()
    # the same tables without the rows they were given prove less
    assert np.count_nonzero(check_label_certificate(H, S, certificate)) < np.count_nonzero(
        rows)


def test_rounds_cap_and_sparse_supports():
    H, S = word_contexts(1, widths=(6, 6), n_contexts=20, V=5)
    full = label_certificate(H, S)
    assert len(label_certificate(H, S, max_rounds=0)) == 0
    assert len(label_certificate(H, S, max_rows=10)) == 0
    sparse = label_certificate(H, sp.csr_matrix(S))
    np.testing.assert_array_equal(check_label_certificate(H, S, sparse),
                                  check_label_certificate(H, S, full))


def test_no_labels_no_rows():
    rng = np.random.default_rng(0)
    H = rng.standard_normal((20, 6))
    S = rng.random((20, 4)) < 0.4
    S[np.arange(20), rng.integers(0, 4, 20)] = True
    certificate = label_certificate(H, S)
    assert len(certificate) == 0 and certificate.n_rounds == 0
    assert not check_label_certificate(H, S, certificate).any()


def test_a_tampered_table_proves_nothing():
    H, S = word_contexts(0, widths=(6, 6), n_contexts=20, V=5)
    c = label_certificate(H, S)
    assert check_label_certificate(H, S, c).any()
    moved = LabelCertificate(c.contexts, c.tokens, c.values * (1 + 1e-3 * np.arange(len(c))),
                             c.rounds)
    assert not check_label_certificate(H, S, moved).any()
    flipped = LabelCertificate(c.contexts, c.tokens, -c.values, c.rounds)
    assert not check_label_certificate(H, S, flipped).any()
    other = LabelCertificate(c.contexts, (c.tokens + 1) % S.shape[1], c.values, c.rounds)
    assert not (check_label_certificate(H, S, other) & lp_separable(H, S)).any()


def test_bad_input():
    H, S = word_contexts(0, widths=(6, 6), n_contexts=20, V=5)
    c = label_certificate(H, S)
    with pytest.raises(ValueError, match="max_rounds"):
        label_certificate(H, S, max_rounds=-1)
    with pytest.raises(ValueError, match="shape"):
        label_certificate(H, S, equal=np.zeros((3, 3), dtype=bool))
    with pytest.raises(ValueError, match="one length"):
        check_label_certificate(H, S, LabelCertificate(c.contexts[:-1], c.tokens, c.values,
                                                       c.rounds))
    with pytest.raises(ValueError, match="tokens in"):
        check_label_certificate(H, S, LabelCertificate(c.contexts, c.tokens + S.shape[1],
                                                       c.values, c.rounds))
    bad = c.values.copy()
    bad[0] = np.nan
    with pytest.raises(ValueError, match="finite"):
        check_label_certificate(H, S, LabelCertificate(c.contexts, c.tokens, bad, c.rounds))
