"""The data recipes of ``skntp.datasets`` against what they document."""

import numpy as np
import pytest

from skntp.datasets import (
    load_text_ntp,
    make_joint_fig3,
    make_ntp_2d_example,
    make_ntp_data,
    make_token_priority_data,
    ntp_from_sequences,
)


def test_make_ntp_data_plants_the_documented_supports():
    X, y, P = make_ntp_data(n_samples=300, n_contexts=6, n_features=5, n_tokens=7,
                            support_size=3, random_state=1, return_params=True)
    assert X.shape == (300, 5) and y.shape == (300,)
    assert P.embeddings.shape == (6, 5) and P.probs.shape == (6, 7)
    np.testing.assert_array_equal(P.support.sum(axis=1), 3)  # a fixed support size
    np.testing.assert_allclose(P.probs.sum(axis=1), 1.0)
    np.testing.assert_array_equal(P.support, P.probs > 0)
    # every row is one of the contexts, and every (context, support token) occurs
    j = np.array([np.flatnonzero((P.embeddings == x).all(axis=1))[0] for x in X])
    assert np.all(P.support[j, y])
    seen = np.zeros_like(P.support)
    seen[j, y] = True
    np.testing.assert_array_equal(seen, P.support)
    # same seed, same data; a range of support sizes stays in range
    X2, y2 = make_ntp_data(n_samples=300, n_contexts=6, n_features=5, n_tokens=7,
                           support_size=3, random_state=1)
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    _, _, P = make_ntp_data(n_samples=300, n_contexts=20, n_features=5, n_tokens=7,
                            support_size=(2, 4), random_state=2, return_params=True)
    sizes = P.support.sum(axis=1)
    assert sizes.min() >= 2 and sizes.max() <= 4 and len(set(sizes)) > 1


def test_make_ntp_data_refuses_impossible_requests():
    with pytest.raises(ValueError, match=r"support_size must lie in \[1, n_tokens\]"):
        make_ntp_data(n_samples=100, n_contexts=3, n_tokens=4, support_size=5)
    with pytest.raises(ValueError, match=r"support_size must lie in \[1, n_tokens\]"):
        make_ntp_data(n_samples=100, n_contexts=3, n_tokens=4, support_size=0)
    with pytest.raises(ValueError, match="n_samples=5 is too small: .* takes 9 samples"):
        make_ntp_data(n_samples=5, n_contexts=3, n_tokens=4, support_size=3)


def test_ntp_2d_example_as_counts_and_as_distributions():
    H, P, w = make_ntp_2d_example()
    np.testing.assert_allclose(np.linalg.norm(H, axis=1), 1.0)  # unit contexts
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_allclose(w, 1 / 3)
    X, y, sw = make_ntp_2d_example(n_samples=300)
    np.testing.assert_array_equal(sw, np.ones(len(y)))
    for j in range(3):  # 100 samples per context, next tokens in proportion p_j
        rows = (X == H[j]).all(axis=1)
        assert rows.sum() == 100
        np.testing.assert_array_equal(np.bincount(y[rows], minlength=5), np.rint(100 * P[j]))
    custom = np.array([[1.0, 1.0, 0, 0, 0], [0, 0, 2.0, 2.0, 0], [0, 0, 0, 1.0, 3.0]])
    _, P2, _ = make_ntp_2d_example(probs=custom)
    np.testing.assert_allclose(P2, custom / custom.sum(axis=1, keepdims=True))


def test_ntp_from_sequences_embeddings():
    seqs = [[0, 1, 2], [1, 2]]
    table = np.arange(12.0).reshape(3, 4)
    X, y = ntp_from_sequences(seqs, table, pooling="mean")
    np.testing.assert_array_equal(y, [1, 2, 2])
    np.testing.assert_allclose(X, [table[0], table[:2].mean(0), table[1]])
    X, _ = ntp_from_sequences(seqs, table)  # "last"
    np.testing.assert_allclose(X, table[[0, 1, 1]])
    X, _ = ntp_from_sequences(seqs, table, context_size=2, pooling="concat")
    np.testing.assert_allclose(X[0], np.r_[np.zeros(4), table[0]])  # left-padded
    mapping = {(0,): [1.0], (0, 1): [2.0], (1,): [3.0]}
    X, y = ntp_from_sequences(seqs, mapping)
    np.testing.assert_allclose(X, [[1.0], [2.0], [3.0]])
    with pytest.raises(ValueError, match=r"no entry for \(9,\)"):
        ntp_from_sequences([[9, 1]], mapping)
    with pytest.raises(ValueError, match="no sequence has two or more tokens"):
        ntp_from_sequences([[0], []], table)
    with pytest.raises(ValueError, match="must be 2-D"):
        ntp_from_sequences(seqs, np.ones(3))
    with pytest.raises(ValueError, match="pooling must be 'last', 'mean' or 'concat'"):
        ntp_from_sequences(seqs, table, pooling="max")
    with pytest.raises(ValueError, match="pooling='concat' needs context_size"):
        ntp_from_sequences(seqs, table, pooling="concat")


def test_token_priority_and_joint_recipes():
    X, y, E = make_token_priority_data(6, 8, 10, 4, acyclic=True, random_state=0)
    assert X.shape == (10, 4) and E.shape == (6, 8)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0)
    assert all(label in seq for seq, label in zip(X, y))  # Assumption 2
    for variant in ("a", "b"):
        Xj, yj, P = make_joint_fig3(variant, return_params=True)
        assert Xj.shape == (3, 2, 2) and set(yj) == {-1.0, 1.0}
        assert (yj * (Xj[np.arange(3), P.selected] @ P.head_mm)).min() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="variant"):
        make_joint_fig3("c")


def test_load_text_ntp_contexts_and_embeddings():
    data = load_text_ntp(context_size=2, n_words=40, embedding="words", n_features=4)
    X, y = data.data, data.target
    assert X.shape == (len(data.contexts), 8)  # two words of 4 features, left-padded
    assert set(y) <= set(data.vocabulary) and len(data.vocabulary) == 40
    for x, c in zip(X[:50], data.contexts[:50]):
        assert 1 <= len(c) <= 2 and set(c) <= set(data.vocabulary)
        np.testing.assert_array_equal(x, data.embeddings[c])
        if len(c) == 1:
            np.testing.assert_array_equal(x[:4], 0.0)
    X1, y1 = load_text_ntp(context_size=1, n_words=30, embedding="onehot", return_X_y=True)
    np.testing.assert_array_equal(np.unique(X1, axis=0).sum(axis=1), 1.0)  # one-hot rows
    Xg, _ = load_text_ntp(n_words=30, return_X_y=True)
    m = np.unique(Xg, axis=0).shape[0]
    assert Xg.shape[1] == m + 8  # d = m + 8 by default: overparameterized
    for kwargs, match in [({"context_size": 0}, "context_size must be a positive"),
                          ({"n_words": 1}, "n_words must be at least 2"),
                          ({"embedding": "bert"}, "embedding must be 'gaussian'"),
                          ({"n_features": 0}, "n_features must be a positive")]:
        with pytest.raises(ValueError, match=match):
            load_text_ntp(**kwargs)
