"""The loss's products with contexts of concatenated word vectors, word by word: the
same numbers as the dense products, on NumPy and torch, the same ``W_fin`` and the same
gradient-descent loss and iterates."""

import functools
import warnings

import numpy as np
import pytest
from helpers import word_contexts

from skntp._backend import get_backend
from skntp.losses._contexts import ContextProducts, word_blocks
from skntp.svm import NTPSeparability, partial_finite_component


def _words(seed, n_words, width, m):
    rng = np.random.default_rng(seed)
    vectors = [rng.standard_normal((n, width)) for n in n_words]
    idx = [rng.integers(0, n, m) for n in n_words]
    return np.hstack([v[i] for v, i in zip(vectors, idx)]), idx


@pytest.mark.parametrize("n_positions", [2, 3])
def test_the_blocks_are_the_words_exactly(n_positions):
    H, idx = _words(0, (9, 11, 7)[:n_positions], 6, 400)
    blocks = word_blocks(H, pass_cost=0)
    assert blocks is not None and len(blocks) == n_positions
    for (start, stop, E, rows), truth in zip(blocks, idx):
        assert stop - start == 6
        np.testing.assert_array_equal(E[rows], H[:, start:stop])  # bitwise
        # one row per word that occurs
        assert len(E) == len(np.unique(truth))


def test_generic_contexts_stay_dense():
    rng = np.random.default_rng(1)
    assert word_blocks(rng.standard_normal((300, 12)), pass_cost=0) is None
    # words, but about as many as contexts: nothing to save
    H, _ = _words(2, (600, 600), 6, 200)
    assert word_blocks(H, pass_cost=0) is None


def test_the_split_of_least_work_is_taken():
    # d = 18: two blocks of 9 mix the words (5 x 5 pairs each), three blocks of 6 are
    # the words; the passes over the table decide between them
    H, _ = _words(3, (5, 5, 5), 6, 2000)
    widths = [[stop - start for start, stop, _, _ in word_blocks(H, pass_cost=c)]
              for c in (0, 1)]
    assert widths == [[6, 6, 6], [9, 9]]
    # on small contexts the passes cost more than the products save
    assert word_blocks(H) is None
    # d = 768, two words of 384 among 11,000 contexts: the decoder's corpus
    rng = np.random.default_rng(0)
    U = rng.standard_normal((2000, 384))
    x, y = rng.integers(0, 2000, (2, 11_000))
    assert len(word_blocks(np.hstack([U[x], U[y]]))) == 2


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_the_factored_products_are_the_dense_ones(backend):
    if backend == "torch":
        pytest.importorskip("torch")
    from skntp._backend import to_numpy

    rng = np.random.default_rng(4)
    H, _ = _words(4, (13, 17, 5), 4, 250)
    m, d, V = H.shape[0], H.shape[1], 9
    pi = rng.random(m)
    pi /= pi.sum()
    Wt, T = rng.standard_normal((d, V)), rng.standard_normal((m, V))
    be = get_backend(backend)
    for dtype, rtol in ((None, 1e-13), (be.xp.float32, 1e-5)):
        ours = ContextProducts(H, pi, be, dtype, blocks=word_blocks(H, pass_cost=0))
        assert ours.blocks is not None
        dt = np.float64 if dtype is None else np.float32
        out = to_numpy(ours.logits_into(be.asarray(Wt, dtype), be.zeros((m, V)) if dtype is None
                                        else be.asarray(np.zeros((m, V)), dtype)))
        assert out.dtype == dt
        np.testing.assert_allclose(out, H @ Wt, rtol=0, atol=rtol * np.abs(H @ Wt).max())
        image = to_numpy(ours.image(be.asarray(T, dtype)))
        truth = T.T @ (pi[:, None] * H)
        assert image.shape == (V, d) and image.dtype == dt
        np.testing.assert_allclose(image, truth, rtol=0, atol=rtol * np.abs(truth).max())


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_w_fin_on_words_is_the_dense_one(backend, monkeypatch):
    # the whole Newton-CG (value, gradient, Hessian products in double and single
    # precision, the line search) on the factored products: the same minimizer
    if backend == "torch":
        pytest.importorskip("torch")
    from skntp.svm import _ntp_partial

    H, S = word_contexts(7, n_words=(8, 9), widths=(4, 4), n_contexts=60, V=6)
    rng = np.random.default_rng(7)
    P = S * rng.random(S.shape)
    sep = NTPSeparability(np.zeros_like(S), S, "stationary point")
    assert word_blocks(H, pass_cost=0) is not None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (whether it converges is not the point)
        monkeypatch.setattr(_ntp_partial, "word_blocks",
                            functools.partial(word_blocks, pass_cost=0))
        ours = partial_finite_component(H, P, sep, tol=1e-10, backend=backend)
        monkeypatch.setattr(_ntp_partial, "word_blocks", lambda H: None)
        dense = partial_finite_component(H, P, sep, tol=1e-10, backend=backend)
    assert ours.n_iter == dense.n_iter
    np.testing.assert_allclose(ours.W, dense.W, rtol=0, atol=1e-8 * np.abs(dense.W).max())
    assert ours.loss == pytest.approx(dense.loss, rel=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("max_elements", [None, 200])
def test_the_cross_entropy_on_words_is_the_dense_one(backend, max_elements, monkeypatch):
    # the gradient-descent loss (eq. (2)) word by word, in one chunk and in five row
    # chunks (the per-word logits gathered and the table summed by word per chunk)
    if backend == "torch":
        pytest.importorskip("torch")
    from skntp._backend import to_numpy
    from skntp.losses import _contexts
    from skntp.losses.decoder import CrossEntropy

    H, S = word_contexts(8, n_words=(9, 10), widths=(4, 3), n_contexts=80, V=11)
    rng = np.random.default_rng(8)
    pi = rng.random(len(H))
    pi /= pi.sum()
    be = get_backend(backend)
    W = be.asarray(3.0 * rng.standard_normal((S.shape[1], H.shape[1])))
    P = S * rng.random(S.shape)
    P /= P.sum(axis=1, keepdims=True)
    monkeypatch.setattr(_contexts, "word_blocks", functools.partial(word_blocks, pass_cost=0))
    ours = CrossEntropy(be, H, pi, P, max_elements=max_elements)
    monkeypatch.setattr(_contexts, "word_blocks", lambda H: None)
    dense = CrossEntropy(be, H, pi, P, max_elements=max_elements)
    assert ours.products.blocks is not None and dense.products.blocks is None
    assert len(ours.chunks) == (1 if max_elements is None else 5)
    (loss, (grad,)), (loss_d, (grad_d,)) = ours((W,)), dense((W,))
    assert float(loss) == pytest.approx(float(loss_d), rel=1e-13)
    grad, grad_d = to_numpy(grad), to_numpy(grad_d)
    np.testing.assert_allclose(grad, grad_d, rtol=0, atol=1e-13 * np.abs(grad_d).max())
    # and the dense one is eq. (2)'s gradient, written here from the paper
    Z = H @ to_numpy(W).T
    E = np.exp(Z - Z.max(axis=1, keepdims=True))
    E /= E.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(grad_d, ((E - P) * pi[:, None]).T @ H, rtol=0,
                               atol=1e-12 * np.abs(grad_d).max())


def test_gradient_descent_on_words_is_the_dense_one(monkeypatch):
    # a whole fit of the decoder: the same iterates whether the contexts enter word by
    # word or dense
    from skntp import NTPDecoderClassifier
    from skntp.losses import _contexts

    H, S = word_contexts(9, n_words=(7, 8), widths=(3, 3), n_contexts=40, V=6,
                         max_support=1)
    y = S.argmax(axis=1)
    fits = []
    for blocks in (functools.partial(word_blocks, pass_cost=0), lambda H: None):
        monkeypatch.setattr(_contexts, "word_blocks", blocks)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (convergence is not the point)
            fits.append(NTPDecoderClassifier(solver="gd", max_iter=200, random_state=0,
                                                 compute_limits=False).fit(H, y).coef_)
    np.testing.assert_allclose(fits[0], fits[1], rtol=0, atol=1e-10 * np.abs(fits[1]).max())
    assert np.abs(fits[0]).max() > 0.1


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_the_hashes_of_blocks_count_their_distinct_rows(dtype):
    # equal blocks hash alike whatever the block (the hash of columns [a, b) is a
    # difference of prefixes), so distinct hashes are a lower bound on distinct rows,
    # and here (no collision) the count; a sign flip is another row
    from skntp.losses._contexts import _hash_prefixes

    H, _ = _words(5, (9, 11, 7), 6, 500)
    H = (np.round(4 * H) if dtype is np.int64 else H).astype(dtype)
    H[0, :6] = -H[1, :6]
    cuts = [0, 6, 9, 12, 18]
    hashes = _hash_prefixes(H, cuts)
    for i, k in [(0, 1), (1, 3), (3, 4), (0, 2), (2, 4), (0, 4)]:
        block = H[:, cuts[i]:cuts[k]]
        n = np.unique(hashes[:, k] - hashes[:, i]).size
        assert n == len(np.unique(block, axis=0))
    assert _hash_prefixes(H.astype(np.int16), cuts) is None


def test_generic_contexts_are_not_sorted(monkeypatch):
    # the hashes rule generic contexts out before any sort of their rows
    rng = np.random.default_rng(6)
    H = rng.standard_normal((3000, 24))
    calls = []
    real = np.unique

    def counted(*args, **kwargs):
        calls.append(kwargs.get("axis"))
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "unique", counted)
    assert word_blocks(H, pass_cost=0) is None
    assert 0 not in calls and calls  # (1-D uniques of the hashes only)
