"""Your own text: TokenEncoder (words <-> ids) and ntp_from_sequences on its output."""

import pickle

import numpy as np
import pytest
from sklearn.base import clone

from skntp import NTPAttentionClassifier, NTPDecoderClassifier
from skntp.datasets import TokenEncoder, ntp_from_sequences

SENTENCES = [
    "The cat sat on the mat.",
    "The dog sat on the log.",
    "A cat saw the dog.",
    "The dog saw a cat on the mat!",
]


def test_vocabulary_order_and_round_trip():
    enc = TokenEncoder().fit(SENTENCES)
    # by decreasing count, ties alphabetical: the (7), cat/dog/on (3), a/mat (2) ...
    assert enc.tokens_[:6].tolist() == ["the", "cat", "dog", "on", "a", "mat"]
    assert enc.counts_[:6].tolist() == [7, 3, 3, 3, 2, 2]
    assert all(enc.tokens_[i] == w for w, i in enc.vocabulary_.items())
    ids = enc.transform(SENTENCES)
    assert [len(s) for s in ids] == [6, 6, 5, 8] and ids[0].dtype == np.int64
    words = enc.inverse_transform(ids)
    assert words[0] == ["the", "cat", "sat", "on", "the", "mat"]
    assert enc.inverse_transform(np.array([0, 1])).tolist() == ["the", "cat"]
    # already split into tokens: the same ids (lowercased)
    split = [s.replace(".", "").replace("!", "").split() for s in SENTENCES]
    assert all(np.array_equal(a, b) for a, b in zip(enc.transform(split), ids))
    # clone, pickle, fit_transform
    again = pickle.loads(pickle.dumps(enc))
    assert again.vocabulary_ == enc.vocabulary_
    assert all(np.array_equal(a, b)
               for a, b in zip(clone(enc).fit_transform(SENTENCES), ids))


def test_special_tokens_and_unknown_words():
    enc = TokenEncoder(bos_token="<s>", eos_token="</s>", max_tokens=3,
                       handle_unknown="use_unknown").fit(SENTENCES)
    assert enc.tokens_[:3].tolist() == ["<unk>", "<s>", "</s>"] and enc.n_tokens_ == 6
    ids = enc.transform(["the cat barked"])[0]
    assert enc.inverse_transform([ids])[0] == ["<s>", "the", "cat", "<unk>", "</s>"]
    dropped = TokenEncoder(max_tokens=3, handle_unknown="ignore").fit(SENTENCES)
    assert dropped.inverse_transform(dropped.transform(["the cat barked"]))[0] == [
        "the", "cat"]
    strict = TokenEncoder(max_tokens=3).fit(SENTENCES)
    with pytest.raises(ValueError, match="outside the vocabulary.*barked"):
        strict.transform(["the cat barked"])
    assert TokenEncoder(min_count=3).fit(SENTENCES).n_tokens_ == 4


@pytest.mark.parametrize("bad, match", [
    ("just one string", "single string"),
    ([], "no sequences"),
    ([3.5], "neither a string"),
])
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        TokenEncoder().fit(bad)


def test_bad_ids_and_parameters():
    enc = TokenEncoder().fit(SENTENCES)
    with pytest.raises(ValueError, match="lie in"):
        enc.inverse_transform([99])
    with pytest.raises(ValueError, match="integers"):
        enc.inverse_transform(np.array([0.5]))
    with pytest.raises(ValueError, match="special token"):
        TokenEncoder(bos_token="the").fit(SENTENCES)
    with pytest.raises(ValueError, match="handle_unknown"):
        TokenEncoder(handle_unknown="skip").fit(SENTENCES)
    with pytest.raises(ValueError, match="empty"):
        TokenEncoder(min_count=100).fit(SENTENCES)


def test_words_to_decoder_and_self_attention_data():
    enc = TokenEncoder(bos_token="<s>")
    ids = enc.fit_transform(SENTENCES)
    # words are not ids: a clear message instead of "invalid literal for int()"
    with pytest.raises(ValueError, match="TokenEncoder"):
        ntp_from_sequences([s.split() for s in SENTENCES], np.eye(4))
    X, y = ntp_from_sequences(ids, "gaussian", context_size=2, random_state=0)
    n = sum(len(s) - 1 for s in ids)
    m = np.unique(X, axis=0).shape[0]
    assert X.shape == (n, m + 8) and y.shape == (n,)
    svm = NTPDecoderClassifier(solver="svm").fit(X, y)
    assert svm.is_ntp_separable_ and svm.is_ntp_compatible_
    assert set(enc.inverse_transform(svm.classes_)) <= set(enc.vocabulary_)
    onehot, y1 = ntp_from_sequences(ids, "onehot", context_size=1)
    assert onehot.shape[1] == np.unique(onehot, axis=0).shape[0] and np.array_equal(y1, y)
    table = np.random.default_rng(0).standard_normal((enc.n_tokens_, 3))
    Xc, _ = ntp_from_sequences(ids, table, context_size=2, pooling="concat")
    assert Xc.shape == (n, 6)
    with pytest.raises(ValueError, match="out of range"):
        ntp_from_sequences(ids, table[:3])
    with pytest.raises(ValueError, match="embed must be"):
        ntp_from_sequences(ids, "glove")
    # embed=None: the prefixes, the input of NTPAttentionClassifier
    prefixes, y2 = ntp_from_sequences(ids, None)
    assert np.array_equal(y2, y) and [len(p) for p in prefixes[:3]] == [1, 2, 3]
    assert prefixes[1].tolist() == ids[0][:2].tolist()
    realizable = [i for i, (p, t) in enumerate(zip(prefixes, y2)) if t in p]
    clf = NTPAttentionClassifier(n_tokens=enc.n_tokens_, random_state=0, max_iter=5)
    clf.fit([prefixes[i] for i in realizable], y2[realizable])
    assert clf.classes_.shape == (enc.n_tokens_,)


@pytest.mark.parametrize("one_pass", [
    lambda seqs: [iter(s) for s in seqs],
    lambda seqs: (iter(s) for s in seqs),
    lambda seqs: [(w for w in s) for s in seqs],
], ids=["list-of-iterators", "generator-of-iterators", "list-of-generators"])
def test_fit_transform_reads_one_pass_sequences_once(one_pass):
    # each sequence was read by fit and then found used up by transform: empty arrays
    seqs = [s.split() for s in SENTENCES]
    want = TokenEncoder(bos_token="<s>").fit_transform(seqs)
    got = TokenEncoder(bos_token="<s>").fit_transform(one_pass(seqs))
    assert [g.tolist() for g in got] == [w.tolist() for w in want]
    assert all(len(g) == len(s) + 1 for g, s in zip(got, seqs))
