"""Bad input, third pass: each case an error that names what is wrong, never a silent
no-op, a wrong answer or a NaN."""

import numpy as np
import pytest

from skntp import AttentionSelector, JointAttentionSVM, KeyQuerySelector, NTPDecoderClassifier
from skntp.datasets import (
    TokenEncoder,
    make_attention_random,
    make_key_query_data,
    make_ntp_data,
    ntp_from_sequences,
)
from skntp.diagnostics import compare_optimizers
from skntp.metrics import make_vocabulary_log_loss_scorer, vocabulary_log_loss


@pytest.fixture(scope="module")
def ntp():
    return make_ntp_data(n_samples=300, random_state=0)


@pytest.mark.parametrize("param", ["lr", "max_iter", "record_every", "tol"])
def test_a_boolean_is_not_a_number(ntp, param):
    X, y = ntp
    est = NTPDecoderClassifier(compute_limits=False, **{"max_iter": 5, param: True})
    with pytest.raises(ValueError, match=f"{param} must be a number, not the boolean True"):
        est.fit(X, y)


def test_a_boolean_is_not_a_query_index_or_a_rank():
    data = make_key_query_data(random_state=0)
    for params in ({"query_index": True}, {"query_index": data.query_index,
                                            "parameterization": "KQ", "rank": True}):
        est = KeyQuerySelector(head=data.head, max_iter=2, **params)
        with pytest.raises(ValueError, match="must be a number, not the boolean True"):
            est.fit(data.X, data.y)


@pytest.mark.parametrize("size", [0, -1, True, 1.5, "2"])
def test_context_size_is_a_positive_integer(size):
    with pytest.raises(ValueError, match="context_size must be None or an integer >= 1"):
        ntp_from_sequences([[1, 2, 3, 4]], "onehot", context_size=size)
    X, y = ntp_from_sequences([[1, 2, 3, 4]], "onehot", context_size=np.int64(2))
    assert X.shape[0] == 3


def test_fit_transform_reads_a_generator_once():
    sentences = ["the cat sat", "the dog sat"]
    ids = TokenEncoder().fit_transform(s for s in sentences)
    want = TokenEncoder().fit_transform(sentences)
    assert len(ids) == 2 and all(np.array_equal(a, b) for a, b in zip(ids, want))
    assert [len(a) for a in ids] == [3, 3]


@pytest.mark.parametrize("eps", [0, -1, 1, 2, np.nan, np.inf, True, "0.1"])
def test_log_loss_scorer_needs_a_probability_floor(eps):
    with pytest.raises(ValueError, match="eps must be a probability floor"):
        make_vocabulary_log_loss_scorer(eps=eps)
    with pytest.raises(ValueError, match="eps must be a probability floor"):
        vocabulary_log_loss([0], np.log([[0.5, 0.5]]), [0, 1], eps=eps)
    assert vocabulary_log_loss([0], np.log([[1e-30, 1.0]]), [0, 1], eps=1e-5) == \
        pytest.approx(-np.log(1e-5))


def test_compare_optimizers_needs_an_optimizer(ntp):
    X, y = ntp
    for solvers in ({}, [], "gd"):
        with pytest.raises(ValueError, match="solvers must be a non-empty dict"):
            compare_optimizers(NTPDecoderClassifier(max_iter=5), X, y, solvers=solvers)
    with pytest.raises(ValueError, match="norms must name at least one norm"):
        compare_optimizers(NTPDecoderClassifier(max_iter=5), X, y, norms=())


def test_fixed_query_is_refused_where_it_is_not_used():
    X, y = make_attention_random(random_state=0)[:2]
    with pytest.raises(ValueError, match=r"fixed_query='random' is not used: train='p'"):
        AttentionSelector(train="p", fixed_query="random", max_iter=2).fit(X, y)
    data = make_key_query_data(random_state=0)
    with pytest.raises(ValueError, match="query_index gives every input its own query"):
        KeyQuerySelector(head=data.head, query_index=data.query_index,
                         fixed_query=np.ones(data.X.shape[2]), max_iter=2).fit(data.X, data.y)


@pytest.mark.parametrize("Est", [AttentionSelector, JointAttentionSVM])
def test_spectral_descent_of_a_vector_has_the_euclidean_limit(Est):
    # the spectral norm of a vector is its Euclidean norm: spectral steepest descent on p
    # (and v) is normalized GD, whose limit is the Frobenius (Euclidean) program
    X, y = make_attention_random(random_state=0)[:2]
    est = Est(solver="nsd", descent_norm="spectral", lr=0.1, max_iter=300).fit(X, y)
    assert est.limit_norm_ == "fro" and est.mm_direction_ is not None
    if Est is AttentionSelector:  # one vector: the very steps of normalized GD
        ngd = Est(solver="ngd", lr=0.1, max_iter=300).fit(X, y)
        np.testing.assert_allclose(est.mm_direction_, ngd.mm_direction_, atol=1e-9)
        np.testing.assert_allclose(est.query_, ngd.query_, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("scale", [1e-13, 1e-6, 1e6, 1e100])
def test_optimal_tokens_and_limits_do_not_depend_on_the_units(scale):
    # the tie test of the optimal tokens is relative to the data's scores: at 1e-12 an
    # absolute 1e-12 made 4-5 tokens per input "optimal", at 1e-13 solver="svm" refused
    import warnings

    X, y = make_attention_random(random_state=0)[:2]
    ref = AttentionSelector(solver="svm").fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = AttentionSelector(solver="svm").fit(X * scale, y)
    np.testing.assert_array_equal(est.optimal_tokens_, ref.optimal_tokens_)
    np.testing.assert_allclose(est.mm_direction_, ref.mm_direction_, atol=1e-9)


@pytest.mark.parametrize("tokens, queries", [(1e-150, 1.0), (1.0, 1e150), (1e150, 1e-150),
                                             (1e-100, 1e-100), (1e140, 1e150)])
def test_the_nuclear_key_query_program_at_extreme_scales(tokens, queries):
    # only the tokens were rescaled to unit magnitude, not the queries: LinAlgError at
    # query scales of 1e150 and 1e200
    from skntp.svm import att_svm_w
    from skntp.svm._norms import norm_value

    data = make_key_query_data(random_state=0)
    ref = att_svm_w(data.tokens, data.queries, data.optimal, norm="nuclear")
    W = att_svm_w(data.tokens * tokens, data.queries * queries, data.optimal, norm="nuclear")
    # W scales as 1 / (tokens * queries): the direction and the normalized value agree
    assert norm_value(W, "nuclear") * tokens * queries == pytest.approx(
        norm_value(ref, "nuclear"), rel=1e-7)
    np.testing.assert_allclose(W / norm_value(W, "fro"), ref / norm_value(ref, "fro"),
                               atol=1e-3)


def test_a_program_beyond_float64_says_so():
    from skntp.svm import att_svm_w

    data = make_key_query_data(random_state=0)
    with pytest.raises(FloatingPointError, match="magnitude beyond float64"):
        att_svm_w(data.tokens * 1e200, data.queries * 1e200, data.optimal, norm="nuclear")


def test_svm_method_names_the_method_of_the_limit_norm_program(ntp):
    # svm_method="lp-ipm" (a max-norm method) raised, because it was applied to the
    # Frobenius program behind alignment_fro too
    X, y = ntp
    est = NTPDecoderClassifier(solver="signgd", svm_method="lp-ipm", lr=0.01,
                               max_iter=50).fit(X, y)
    assert est.limit_norm_ == "max" and est.svm_result_.method == "lp-ipm"
    assert np.isfinite(est.history_["alignment_fro"]).all()
    assert est._svm_method("fro") == "auto" and est._svm_method("max") == "lp-ipm"
