"""ContextEmbedder: contexts to vectors by their tokens, the same for training and new text.

Issue #48, item 1: ``ntp_from_sequences(ids, "gaussian")`` hands out vectors by order of
first appearance, so the same context gets another vector in another text.  The embedder
maps a context to a pooling of its tokens' rows; these tests hold it to that (content,
not order), to its unknown-token rule, its three token tables and three poolings, to
scikit-learn's conventions, and to the errors that point a user to the right call.
"""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import parametrize_with_checks

from skntp import NTPDecoderClassifier
from skntp._sequences import reject_token_sequences
from skntp.datasets import ContextEmbedder, TokenEncoder, ntp_from_sequences

TRAIN = ["the quick fox ran home", "the cat sat on the mat", "a dog sat on the rug",
         "the cat ran home", "a quick dog saw the cat"]
NEW = ["the cat sleeps on the rug", "a fox saw the dog"]


class _Table:
    """A token table as a function of the ids (module level: picklable), with a repr
    free of memory addresses: the test ids of every pytest-xdist worker are the same."""

    def __call__(self, ids):
        return np.c_[np.cos(ids), np.sin(ids), ids / 10.0]

    def __repr__(self):
        return "_table"

    def __eq__(self, other):  # clone deep-copies it: every copy is the same table
        return isinstance(other, _Table)

    def __hash__(self):
        return hash(_Table)


_table = _Table()


class _EmbeddingLayer:
    """Stands for a trained model's embedding layer: ids -> vectors, counts its calls."""

    def __init__(self, weight):
        self.weight, self.calls = weight, 0

    def __call__(self, ids):
        self.calls += 1
        return self.weight[ids]


#: the input of fit/transform is a list of token-id contexts of any length
_ANY_LENGTH = ("contexts are token-id sequences whose length varies (a list of contexts "
               "of any lengths is valid input), so there is no fixed number of input "
               "features and a context of another length is not an error")
EXPECTED_FAILURES = {
    "check_n_features_in": _ANY_LENGTH,
    "check_n_features_in_after_fitting": _ANY_LENGTH,
    "check_transformer_general": "its last step requires an error when transform gets "
    "fewer columns than fit: " + _ANY_LENGTH,
}


@parametrize_with_checks(
    [ContextEmbedder(random_state=0),
     ContextEmbedder(random_state=0, handle_unknown="random", context_size=2),
     ContextEmbedder("onehot", pooling="mean", handle_unknown="zeros"),
     ContextEmbedder(_table, pooling="last", n_tokens=40)],
    expected_failed_checks=lambda est: EXPECTED_FAILURES)
def test_sklearn_compatible(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(estimator)


@pytest.fixture(scope="module")
def encoder():
    return TokenEncoder(bos_token="<s>").fit(TRAIN + NEW)


def _rows_of(X, contexts, context):
    """The rows of X whose context is ``context`` (a tuple of ids)."""
    return X[[tuple(c) == context for c in contexts]]


def test_the_same_context_gets_the_same_vector_in_every_text(encoder):
    """The issue's case: "the cat" of new text gets the vector of "the cat", whatever
    the order of the texts; with embed="gaussian" it does not (the bug)."""
    ids, new_ids = encoder.transform(TRAIN), encoder.transform(NEW)
    the_cat = tuple(encoder.transform([["the", "cat"]])[0][1:])
    params = dict(context_size=2, n_tokens=encoder.n_tokens_, random_state=0)
    emb = ContextEmbedder(**params)
    X, _ = ntp_from_sequences(ids, emb)
    X_new, _ = ntp_from_sequences(new_ids, emb)
    ctx = ntp_from_sequences(ids, None, context_size=2)[0]
    ctx_new = ntp_from_sequences(new_ids, None, context_size=2)[0]
    train_rows, new_rows = _rows_of(X, ctx, the_cat), _rows_of(X_new, ctx_new, the_cat)
    assert len(train_rows) == 2 and len(new_rows) == 1
    assert np.all(train_rows == new_rows[0])
    # another embedder of the same parameters, fitted on the texts in the other order
    other = ContextEmbedder(**params).fit(ctx_new[::-1] + ctx[::-1])
    np.testing.assert_array_equal(other.transform(ctx), X)
    # distinct contexts, distinct vectors (concat keeps the order of the words)
    assert np.unique(X, axis=0).shape[0] == len(set(map(tuple, ctx)))
    # the bug this replaces: "gaussian" numbers the contexts of each text
    G, _ = ntp_from_sequences(ids, "gaussian", context_size=2, n_features=12,
                              random_state=0)
    G_new, _ = ntp_from_sequences(new_ids, "gaussian", context_size=2, n_features=12,
                                  random_state=0)
    assert not np.array_equal(_rows_of(G, ctx, the_cat)[0], _rows_of(G_new, ctx_new, the_cat)[0])


def test_fit_on_one_text_predict_on_another_is_fit_on_the_union(encoder):
    """Goal of #48: the decoder fitted on one text predicts on another text what it
    predicts on the rows of those contexts in the embedding of the union."""
    ids, new_ids = encoder.transform(TRAIN), encoder.transform(NEW)
    params = dict(context_size=2, n_tokens=encoder.n_tokens_, random_state=0)
    X, y = ntp_from_sequences(ids, ContextEmbedder(**params))
    clf = NTPDecoderClassifier(solver="gd", max_iter=200, compute_limits=False,
                               vocabulary=encoder.n_tokens_, random_state=0).fit(X, y)
    emb = ContextEmbedder(**params).fit(ntp_from_sequences(ids, None)[0])
    X_new, _ = ntp_from_sequences(new_ids, emb)
    X_union, _ = ntp_from_sequences(ids + new_ids, ContextEmbedder(**params))
    np.testing.assert_array_equal(X_union[len(X):], X_new)
    np.testing.assert_array_equal(clf.predict_proba(X_new),
                                  clf.predict_proba(X_union[len(X):]))
    # a context of both texts ("<s> the") gets the training prediction
    np.testing.assert_array_equal(clf.predict_proba(X_new[1:2]), clf.predict_proba(X[1:2]))
    assert clf.predict_proba(X_new).shape == (len(X_new), encoder.n_tokens_)


@pytest.mark.parametrize("pooling", ["concat", "mean", "last"])
def test_poolings(pooling):
    table = np.arange(12.0).reshape(4, 3) ** 1.5
    contexts = [[1], [0, 2], [3, 0, 2], [2, 0, 3]]
    emb = ContextEmbedder(table, pooling=pooling, context_size=2).fit(contexts)
    X = emb.transform(contexts)
    if pooling == "concat":  # the last 2 rows, oldest first, left-padded with zeros
        np.testing.assert_array_equal(X[0], np.r_[np.zeros(3), table[1]])
        np.testing.assert_array_equal(X[1], np.r_[table[0], table[2]])
        np.testing.assert_array_equal(X[2], X[1])  # token 3 is outside the window
        assert emb.get_feature_names_out().shape == (6,)
    elif pooling == "mean":
        np.testing.assert_allclose(X[1], table[[0, 2]].mean(axis=0))
        assert np.array_equal(X[1], X[2])
        np.testing.assert_allclose(X[3], table[[0, 3]].mean(axis=0))
    else:
        np.testing.assert_array_equal(X, table[[1, 2, 2, 3]])
    assert X.shape[1] == emb.get_feature_names_out().shape[0]


def test_window_and_mean_are_exact():
    """concat with context_size=None reads the longest context seen by fit; the mean is
    bit-identical whatever the order of the tokens (the decoder aggregates contexts by
    equality of their rows)."""
    emb = ContextEmbedder(n_features=5, random_state=0).fit([[1, 2, 3], [4]])
    assert emb.context_size_ == 3 and emb.transform([[0, 1, 2, 3]]).shape == (1, 15)
    np.testing.assert_array_equal(emb.transform([[0, 1, 2, 3]]), emb.transform([[1, 2, 3]]))
    np.testing.assert_array_equal(emb.transform([[2, 3]])[0, :5], 0.0)  # left-padded
    rng = np.random.default_rng(0)
    mean = ContextEmbedder(rng.standard_normal((30, 7)), pooling="mean").fit([[0]])
    tokens = rng.integers(0, 30, 25)
    X = mean.transform([tokens, rng.permutation(tokens), np.r_[tokens, tokens]])
    assert np.array_equal(X[0], X[1]) and np.allclose(X[0], X[2])
    whole = ContextEmbedder(np.eye(4), pooling="mean").fit([[0, 1, 1, 1]])
    assert whole.context_size_ is None
    np.testing.assert_array_equal(whole.transform([[0, 1, 1, 1]]), [[0.25, 0.75, 0, 0]])


def test_gaussian_rows_depend_on_the_seed_and_width_only():
    small = ContextEmbedder(n_features=4, n_tokens=5, random_state=3).fit([[0]])
    large = ContextEmbedder(n_features=4, n_tokens=9, random_state=3,
                            handle_unknown="random").fit([[0]])
    np.testing.assert_array_equal(large.embeddings_[:5], small.embeddings_)
    assert ContextEmbedder(n_tokens=300).fit([[0]]).embeddings_.shape == (300, 256)
    assert ContextEmbedder().fit([[0, 6]]).embeddings_.shape == (7, 7)  # d_tok = V
    np.testing.assert_allclose(np.linalg.norm(large.embeddings_, axis=1).mean(), 1.0,
                               atol=0.35)


def test_unknown_token_rules():
    contexts = [[0, 1], [2, 1]]
    strict = ContextEmbedder(n_features=3, random_state=0).fit(contexts)
    assert strict.n_tokens_ == 3 and strict.unknown_vector_ is None
    with pytest.raises(ValueError, match=r"token id\(s\) \[5, 7\] out of range.*n_tokens_=3"):
        strict.transform([[5, 1], [7]])
    with pytest.raises(ValueError, match="out of range"):  # in fit too
        ContextEmbedder(n_tokens=2).fit(contexts)
    zeros = ContextEmbedder(n_features=3, handle_unknown="zeros", random_state=0).fit(contexts)
    X = zeros.transform([[5, 1], [1, 5]])
    np.testing.assert_array_equal(X[0, :3], 0.0)
    np.testing.assert_array_equal(X[0, 3:], zeros.embeddings_[1])
    np.testing.assert_array_equal(X[1, 3:], 0.0)
    rand = ContextEmbedder(n_features=3, handle_unknown="random", random_state=0).fit(contexts)
    np.testing.assert_array_equal(rand.embeddings_, zeros.embeddings_)  # same table
    u = rand.unknown_vector_
    rms = np.sqrt(np.mean(np.sum(rand.embeddings_**2, axis=1)))
    np.testing.assert_allclose(np.linalg.norm(u), rms)
    np.testing.assert_array_equal(rand.transform([[9, 1], [5, 1]])[:, :3], [u, u])
    again = clone(rand).fit([[2]])
    np.testing.assert_array_equal(again.unknown_vector_, u)  # fixed by the seed
    mean = ContextEmbedder(np.eye(3), pooling="mean", handle_unknown="zeros").fit([[0]])
    np.testing.assert_array_equal(mean.transform([[0, 7]]), [[0.5, 0, 0]])


def test_callable_token_table():
    weight = np.random.default_rng(1).standard_normal((6, 4))
    layer = _EmbeddingLayer(weight)
    emb = ContextEmbedder(layer, pooling="last", n_tokens=6).fit([[0, 1]])
    assert layer.calls == 1
    np.testing.assert_array_equal(emb.embeddings_, weight)
    np.testing.assert_array_equal(emb.transform([[3], [1, 5]]), weight[[3, 5]])
    assert layer.calls == 1  # transform reads the table, not the layer
    # without n_tokens: ids up to the largest seen by fit
    assert ContextEmbedder(layer).fit([[0, 2]]).embeddings_.shape == (3, 4)
    with pytest.raises(ValueError, match=r"one row per token id, shape \(6, d_tok\)"):
        ContextEmbedder(lambda ids: weight[:3], n_tokens=6).fit([[0]])
    with pytest.raises(ValueError, match="NaN or infinity"):
        ContextEmbedder(lambda ids: np.full((len(ids), 2), np.nan)).fit([[0]])
    with pytest.raises(ValueError, match="differs from the 6 rows"):
        ContextEmbedder(weight, n_tokens=4).fit([[0]])


def test_pickle_and_clone():
    contexts = [[0, 1, 2], [3], [2, 2]]
    for emb in (ContextEmbedder(random_state=0, handle_unknown="random"),
                ContextEmbedder(_table, pooling="mean", context_size=2, n_tokens=8)):
        emb.fit(contexts)
        loaded = pickle.loads(pickle.dumps(emb))
        np.testing.assert_array_equal(loaded.transform(contexts + [[7]]),
                                      emb.transform(contexts + [[7]]))
        fresh = clone(emb)
        assert not hasattr(fresh, "embeddings_")
        assert fresh.get_params() == emb.get_params()
        np.testing.assert_array_equal(fresh.fit_transform(contexts), emb.transform(contexts))


@pytest.mark.parametrize("bad, error, match", [
    (["the cat"], ValueError, "TokenEncoder"),
    ([["the", "cat"]], ValueError, "TokenEncoder"),
    ("the cat", ValueError, "single string"),
    ([[0, 1.5]], ValueError, "must be integers"),
    ([[0, -1]], ValueError, "Negative values"),
    ([[0], []], ValueError, "context 1 is empty"),
    ([0, 1], ValueError, "1-D sequence of token ids"),
    (np.array([0, 1]), ValueError, "Reshape your data"),
    ([], ValueError, "found 0 contexts"),
])
def test_bad_contexts(bad, error, match):
    with pytest.raises(error, match=match):
        ContextEmbedder().fit(bad)


def test_ntp_from_sequences_with_an_embedder(encoder):
    ids = encoder.transform(TRAIN)
    emb = ContextEmbedder(context_size=2, random_state=0)
    X, y = ntp_from_sequences(ids, emb)  # fitted in place ...
    table = emb.embeddings_.copy()
    again, _ = ntp_from_sequences(ids[1:2], emb)  # ... and then only read
    np.testing.assert_array_equal(emb.embeddings_, table)
    np.testing.assert_array_equal(again, X[len(ids[0]) - 1:len(ids[0]) + len(ids[1]) - 2])
    refit, _ = ntp_from_sequences(ids[1:2], ContextEmbedder(context_size=2, random_state=0))
    assert refit.shape[1] < again.shape[1]  # (a refit would read fewer tokens)
    assert X.shape == (sum(len(s) - 1 for s in ids), 2 * emb.embeddings_.shape[1])
    # a word fit never saw in a context: out of the table without n_tokens
    sleeps = encoder.vocabulary_["sleeps"]
    assert sleeps >= emb.n_tokens_
    with pytest.raises(ValueError, match="n_tokens=encoder.n_tokens_"):
        ntp_from_sequences(encoder.transform(NEW), emb)
    with pytest.raises(ValueError, match="pooling, random_state.*ContextEmbedder"):
        ntp_from_sequences(ids, emb, pooling="mean", random_state=0)
    with pytest.raises(ValueError, match="TokenEncoder"):
        ntp_from_sequences([s.split() for s in TRAIN], ContextEmbedder())


@pytest.mark.parametrize("n_features", [2.5, 0, -3, True, "4", 4.0])
def test_n_features_is_a_positive_integer(n_features, encoder):
    ids = encoder.transform(TRAIN)
    with pytest.raises(ValueError, match=r"n_features must be None or a positive integer.*"
                                         r"not rounded"):
        ntp_from_sequences(ids, "gaussian", n_features=n_features, random_state=0)
    with pytest.raises(ValueError, match="n_features"):
        ContextEmbedder(n_features=n_features).fit([[0]])
    X, _ = ntp_from_sequences(ids, "gaussian", n_features=np.int64(5), random_state=0)
    assert X.shape[1] == 5


@pytest.mark.parametrize("X, found", [
    ([np.array([0, 1, 2]), np.array([0, 3])], "TokenEncoder's output"),
    ([np.array([0, 1]), np.array([2, 3])], "TokenEncoder's output"),  # same lengths
    (["the cat sat", "the dog"], "text"),
    ("the cat", "a string"),
    ([[0.5, 1.0, 2.0], [1.0, 2.0]], "different lengths"),
])
def test_token_sequences_are_refused_where_vectors_are_expected(X, found):
    with pytest.raises(ValueError, match=rf"NTPDecoderClassifier fits context embeddings.*"
                                         rf"got .*{found}.*ntp_from_sequences.*ContextEmbedder"):
        reject_token_sequences(X, NTPDecoderClassifier())


@pytest.mark.parametrize("X", [np.ones((3, 2)), [[0.5, 1.0], [1.0, 2.0]],
                               [np.ones(2), np.zeros(2)], np.array([[1, 2]], dtype=object)])
def test_vectors_pass(X):
    assert reject_token_sequences(X, "NTPDecoderClassifier") is None


def test_a_text_pipeline_that_cannot_work_says_what_to_call():
    y = np.arange(len(TRAIN))
    pipe = make_pipeline(TokenEncoder(), NTPDecoderClassifier(max_iter=5))
    with pytest.raises(ValueError, match="ntp_from_sequences.*ContextEmbedder"):
        pipe.fit(TRAIN, y)


def test_a_pipeline_of_single_contexts_works():
    """Samples that are one context each (y: the next words): TokenEncoder, then the
    embedder, then the decoder, which predicts words."""
    contexts = ["the cat", "cat sat", "the dog", "dog sat", "sat on", "a cat"]
    next_words = ["sat", "on", "sat", "on", "the", "sat"]
    pipe = make_pipeline(TokenEncoder(), ContextEmbedder(context_size=2, random_state=0),
                         NTPDecoderClassifier(solver="gd", max_iter=300,
                                              compute_limits=False, random_state=0))
    pipe.fit(contexts, next_words)
    assert pipe.predict(["the cat", "sat on"]).tolist() == ["sat", "the"]
