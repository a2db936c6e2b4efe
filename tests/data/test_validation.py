"""The sequence validators (``skntp._sequences``, ``skntp.graphs``): what they accept,
how they pad, and the message of every refusal."""

import numpy as np
import pytest
import scipy.sparse as sp

from skntp._sequences import check_sequences
from skntp.graphs import check_token_labels, check_token_sequences


def test_token_vector_sequences_are_padded_with_a_mask():
    seqs = [np.ones((2, 3)), 2 * np.ones((1, 3))]
    arr, mask = check_sequences(seqs)
    assert arr.shape == (2, 2, 3)
    np.testing.assert_array_equal(mask, [[True, True], [True, False]])
    np.testing.assert_array_equal(arr[1], [[2, 2, 2], [0, 0, 0]])
    # equal-length 1-D sequences are scalar tokens, equal-shape 2-D ones a 3-D array
    arr, mask = check_sequences([[1.0, 2.0], [3.0, 4.0]])
    assert arr.shape == (2, 2, 1) and mask.all()
    arr, mask = check_sequences([np.ones((2, 3)), np.zeros((2, 3))])
    assert arr.shape == (2, 2, 3) and mask.all()
    arr, _ = check_sequences(np.arange(6.0).reshape(2, 3))  # 2-D array: scalar tokens
    np.testing.assert_array_equal(arr[..., 0], [[0, 1, 2], [3, 4, 5]])
    arr, _ = check_sequences(np.array([[[1]], [[2]]], dtype=np.int64))
    assert arr.dtype == np.float64


@pytest.mark.parametrize("X, exc, match", [
    (sp.csr_matrix(np.ones((2, 2))), TypeError, "X: sparse input is not supported"),
    (5, ValueError, "X must be an array or a list of sequences"),
    ([], ValueError, r"X is empty: found 0 sequences\."),
    ([np.ones(2), np.ones(3)], ValueError, r"X\[0\] must be a 2-D \(seq_len, n_features\)"),
    (np.zeros((2, 0, 3)), ValueError, "X contains an empty sequence"),
    (np.zeros((2, 2, 0)), ValueError, r"tokens of dimension 0 \(n_features=0\)"),
    ([np.zeros((2, 0)), np.zeros((1, 0))], ValueError, "tokens of dimension 0"),
])
def test_token_vector_sequences_refusals(X, exc, match):
    with pytest.raises(exc, match=match):
        check_sequences(X)


def test_token_id_sequences_accept_integral_values_of_any_type():
    for X in ([[1, 2], [3]], [np.array([1.0, 2.0]), np.array([3.0])],
              np.array([[1, 2], [3, 3]], dtype=np.uint8), [[True, False], [True]],
              np.array([[1, 2], [3]], dtype=object)):
        ids, mask, last = check_token_sequences(X)
        assert ids.dtype == np.int64
        np.testing.assert_array_equal(last, [ids[0, 1], ids[1, 0] if not mask[1, 1]
                                              else ids[1, 1]])


@pytest.mark.parametrize("X, exc, match", [
    (5, ValueError, "X must be a 2-D array of token ids or a list of sequences"),
    ([[1, 2], [[1, 2]]], ValueError, r"X\[1\] must be a 1-D sequence of token ids"),
    (np.zeros((2, 0)), ValueError, r"Found array with 0 feature\(s\)"),
    ([[1.0, np.nan]], ValueError, r"Input X\[0\] contains NaN or infinity"),
    ([[1 + 1j, 2]], ValueError, r"Complex data not supported: X\[0\] must hold integer"),
    (np.array([[1, {}]], dtype=object), TypeError, "must hold integer token ids; the "
     "float"),
    (np.array([["a", 1]], dtype=object), ValueError, r"X must hold integer token ids: "),
])
def test_token_id_sequences_refusals(X, exc, match):
    with pytest.raises(exc, match=match):
        check_token_sequences(X)


def test_token_labels():
    np.testing.assert_array_equal(check_token_labels([[1], [2]], 2), [1, 2])  # a column
    np.testing.assert_array_equal(check_token_labels(["1", "2"], 2), [1, 2])
    for y, match in [(np.ones((2, 2)), r"y must be 1-D next-token ids, got shape \(2, 2\)"),
                     (["a", "b"], "Unknown label type: y must hold integer next-token ids, "
                      "got dtype <U1"),
                     ([1, 3], r"y: token ids out of range: found id 3 but the vocabulary "
                      r"has 3 tokens \(ids 0..2\)")]:
        with pytest.raises(ValueError, match=match):
            check_token_labels(y, 2, n_tokens=3)
