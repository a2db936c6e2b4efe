"""Validation of sequence inputs for the attention estimators.

Sequences of token vectors arrive as a 3-D array ``(n, T, d)`` or a list of
``(T_i, d)`` arrays of different lengths; they are stored padded to the
longest length with a boolean ``mask`` of real tokens.  A 2-D array
``(n, T)`` (what scikit-learn's generic checks pass) is read as ``n``
sequences of ``T`` scalar tokens (``d = 1``).
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import assert_all_finite, column_or_1d
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

__all__ = ["binary_labels", "check_attention_input", "check_sequences", "key_query_matrix",
           "reject_token_sequences"]


def check_sequences(X, *, n_features=None, dtype=np.float64, name="X"):
    """Validate sequences and return ``(padded, mask)``.

    Parameters
    ----------
    X : array-like of shape (n, T, d) or (n, T), or list of (T_i, d) arrays
    n_features : int, optional
        Expected token dimension ``d`` (from ``fit``); a mismatch raises.
    dtype : dtype, default=float64

    Returns
    -------
    padded : ndarray of shape (n, T_max, d)
        Zero-padded token vectors.
    mask : ndarray of shape (n, T_max), bool
        True at real tokens.

    Raises
    ------
    ValueError
        On empty input, empty sequences, inconsistent token dimensions,
        NaN/inf, or a dimension different from ``n_features``.
    """
    if hasattr(X, "toarray"):
        raise TypeError(f"{name}: sparse input is not supported; pass a dense array.")
    if isinstance(X, np.ndarray) and X.dtype != object:
        arr = X
        if arr.ndim == 2:
            arr = arr[:, :, None]
        if arr.ndim != 3:
            raise ValueError(
                f"{name} must be 3-D (n_samples, seq_len, n_features), a 2-D array "
                f"(n_samples, seq_len) of scalar tokens, or a list of 2-D arrays; got "
                f"shape {X.shape}."
            )
        seqs = None
    else:
        try:
            seqs = [np.asarray(s) for s in X]
        except TypeError as exc:
            raise ValueError(f"{name} must be an array or a list of sequences.") from exc
        if seqs and all(s.ndim == 1 for s in seqs) and len({s.shape for s in seqs}) == 1:
            arr, seqs = np.stack(seqs)[:, :, None], None
        elif seqs and all(s.ndim == 2 for s in seqs) and len({s.shape for s in seqs}) == 1:
            arr, seqs = np.stack(seqs), None
    if any(np.iscomplexobj(a) for a in ([arr] if seqs is None else seqs)):
        raise ValueError(f"Complex data not supported: {name} must hold real token vectors.")
    if seqs is None:
        if arr.dtype.kind not in "biuf":
            try:
                arr = arr.astype(dtype)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{name} must be numeric: {exc}") from exc
        arr = np.asarray(arr, dtype=dtype)
        n, T, d = arr.shape
        mask = np.ones((n, T), dtype=bool)
    else:
        if not seqs:
            raise ValueError(f"{name} is empty: found 0 sequences.")
        for i, s in enumerate(seqs):
            if s.ndim != 2:
                raise ValueError(
                    f"{name}[{i}] must be a 2-D (seq_len, n_features) array, got shape "
                    f"{s.shape}."
                )
        dims = {s.shape[1] for s in seqs}
        if len(dims) > 1:
            raise ValueError(
                f"{name}: sequences have different token dimensions {sorted(dims)}."
            )
        n, d = len(seqs), dims.pop()
        T = max(s.shape[0] for s in seqs)
        arr = np.zeros((n, T, d), dtype=dtype)
        mask = np.zeros((n, T), dtype=bool)
        for i, s in enumerate(seqs):
            arr[i, : s.shape[0]] = s
            mask[i, : s.shape[0]] = True
    if n == 0:
        raise ValueError(f"{name} is empty: found 0 sequences (n_samples=0).")
    if T == 0 or not mask.any(axis=1).all():
        raise ValueError(f"{name} contains an empty sequence.")
    if d == 0:
        raise ValueError(f"{name} has tokens of dimension 0 (n_features=0).")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"Input {name} contains NaN or infinity.")
    if n_features is not None and d != n_features:
        raise ValueError(
            f"{name} has tokens of dimension {d}, but the estimator was fitted with "
            f"{n_features} features."
        )
    return arr, mask


def reject_token_sequences(X, estimator):
    """Raise a ``ValueError`` that names the right call when ``X`` is text, not vectors.

    For the estimators whose ``X`` is one context embedding per row
    (:class:`~skntp.NTPDecoderClassifier`, :class:`~skntp.NTPEmbeddingClassifier`):
    called before :func:`~sklearn.utils.validation.validate_data`, it catches
    raw sentences and :class:`~skntp.datasets.TokenEncoder`'s output (a list
    of 1-D integer arrays, one per sentence), which would otherwise end in
    NumPy's "inhomogeneous shape" error or, when every sentence has the same
    length, be fitted silently with token ids as features.  Arrays and lists
    of numeric rows pass untouched (nothing is converted).

    Parameters
    ----------
    X : object
        The estimator's input.
    estimator : estimator instance or str
        Named in the message.
    """
    name = estimator if isinstance(estimator, str) else type(estimator).__name__
    if isinstance(X, np.ndarray) and X.dtype != object:
        return
    if isinstance(X, str):
        found = "a string"
    elif isinstance(X, (list, tuple, np.ndarray)) and len(X):
        rows = list(X)
        if any(isinstance(r, str) for r in rows):
            found = "text (strings)"
        elif all(isinstance(r, np.ndarray) and r.ndim == 1 and r.dtype.kind in "iu"
                 for r in rows):
            found = "a list of 1-D integer arrays (TokenEncoder's output)"
        elif all(np.ndim(r) == 1 for r in rows) and len({len(r) for r in rows}) > 1:
            found = "sequences of different lengths"
        else:
            return
    else:
        return
    raise ValueError(
        f"{name} fits context embeddings, an array (n_contexts, n_features) with the "
        f"next token of each context as its label; got {found}. Make the contexts and "
        "their next tokens of every prefix of your sequences with "
        "X, y = skntp.datasets.ntp_from_sequences(TokenEncoder().fit_transform(sentences), "
        "ContextEmbedder()); in a Pipeline whose samples are single contexts (y their "
        "next words), put ContextEmbedder() between TokenEncoder() and the estimator.")


def check_attention_input(estimator, X, *, reset):
    """``(padded, mask)`` of an attention estimator's input, setting its input attributes.

    A 2-D input ``(n, T)`` goes through
    :func:`~sklearn.utils.validation.validate_data` (so ``n_features_in_``
    is its number of columns ``T``, and predictions need the same ``T``); 3-D
    and list inputs through :func:`check_sequences` (``n_features_in_ = d``).
    With ``reset=True`` (``fit``) the estimator records which form it saw.
    """
    if not reset:
        check_is_fitted(estimator)
    if hasattr(X, "__array__") and not hasattr(X, "shape") and not hasattr(X, "columns"):
        X = np.asarray(X)
    ndim = len(X.shape) if hasattr(X, "shape") else None
    if ndim is None and isinstance(X, (list, tuple)) and len(X) and not any(
            np.ndim(s) >= 2 for s in X):
        try:
            ndim = np.asarray(X, dtype=float).ndim
        except (TypeError, ValueError):
            ndim = None
    if ndim == 1:
        raise ValueError(
            f"Expected a 3-D array (n_samples, seq_len, n_features), a 2-D array "
            f"(n_samples, seq_len) or a list of 2-D sequences; got a 1-D array of shape "
            f"{np.shape(X)}. Reshape your data either using array.reshape(-1, 1) if your "
            "data has a single feature or array.reshape(1, -1) if it contains a single "
            "sample.")
    if ndim == 2 and (reset or getattr(estimator, "_input_2d", False)):
        X2 = validate_data(estimator, X, reset=reset, dtype=np.float64)
        if reset:
            estimator._input_2d, estimator._token_dim = True, 1
        return X2[:, :, None], np.ones(X2.shape, dtype=bool)
    arr, mask = check_sequences(np.asarray(X, dtype=float) if ndim == 2 else X,
                                n_features=None if reset else estimator._token_dim)
    if reset:
        estimator._input_2d, estimator._token_dim = False, arr.shape[2]
        estimator.n_features_in_ = arr.shape[2]
        if hasattr(estimator, "feature_names_in_"):
            del estimator.feature_names_in_
    return arr, mask


def binary_labels(y, n, classes=None, model="the estimator"):
    """``(classes, Y)``: two sorted labels and ``Y`` in ``{-1, +1}`` (``classes[1]`` is +1).

    ``classes`` names both labels (then ``y`` may hold one of them only, e.g.
    a single input); ``None`` takes them from ``y``.
    """
    y = column_or_1d(y, warn=True)
    if y.shape[0] != n:
        raise ValueError(f"X has {n} sequences but y has {y.shape[0]} labels.")
    if y.dtype.kind in "fc":
        assert_all_finite(y, input_name="y")  # before type_of_target's cast warning
    check_classification_targets(y)
    if classes is not None:
        labels = np.unique(np.asarray(classes))
        if labels.shape[0] != 2:
            raise ValueError(f"classes must name exactly 2 labels, got {classes!r}.")
        unknown = ~np.isin(y, labels)
        if unknown.any():
            raise ValueError(f"labels {np.unique(y[unknown])[:10]!r} are not in "
                             f"classes={labels!r}.")
        return labels, np.where(y == labels[1], 1.0, -1.0)
    labels = np.unique(y)
    if labels.shape[0] == 1:
        raise ValueError(
            f"{model} needs 2 classes in y; got 1 class: {labels[0]!r}. The labels are "
            "mapped to Y = -1/+1; to fit inputs of one label (e.g. n = 1, Thm. 2) name "
            "both with classes=[-1, 1].")
    if labels.shape[0] > 2:
        raise ValueError(
            f"Only binary classification is supported: {model}'s labels are Y in "
            f"{{-1, +1}} (Sec. 1.1); y has {labels.shape[0]} classes.")
    return labels, np.where(y == labels[1], 1.0, -1.0)


def key_query_matrix(key_query, d):
    """The key-query matrix ``W`` (k, d): the identity for ``None``."""
    if key_query is None:
        return np.eye(d)
    return checked_parameter(key_query, "key_query", (None, d),
                             f"(k, {d}) (d the token dimension)")


def checked_parameter(a, name, shape, expected, ravel=False):
    """``a`` as a finite real float array of ``shape`` (``None``: any size there).

    ``expected`` is the shape as the error message names it; ``ravel`` flattens
    a vector given as a row or column first.
    """
    arr = _real(a, name)
    arr = arr.ravel() if ravel else arr
    if arr.ndim != len(shape) or any(n is not None and n != m
                                     for n, m in zip(shape, arr.shape)):
        raise ValueError(f"{name} must have shape {expected}, got {np.shape(a)}.")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or infinity.")
    return arr


def _real(a, name):
    """``a`` as a float array; complex values are an error, not a silent real part."""
    arr = np.asarray(a)
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} must be real; got complex values.")
    return arr.astype(float)
