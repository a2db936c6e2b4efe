"""Edge cases of the estimators and the core that the theorem tests do not reach.

Each test states the case and checks the documented outcome: the value, the
warning or the error message.
"""

import io

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import nnls as scipy_nnls
from sklearn.exceptions import ConvergenceWarning

import skntp.svm.solvers.dual_active_set as dual_active_set
import skntp.svm.solvers.least_distance as least_distance
import skntp.svm.solvers.nnls_working_set as nnls_working_set
from skntp import AttentionSelector, JointAttentionSVM, NTPAttentionClassifier, NTPDecoderClassifier
from skntp._backend import get_backend, to_numpy
from skntp._progress import ProgressBar
from skntp.attention import diagnose_selection
from skntp.datasets import make_attention_fig1c, make_joint_fig3, make_token_priority_data
from skntp.losses.self_attention import SelfAttentionRisk
from skntp.svm import (
    Constraints,
    KeyScores,
    MaxMarginProblem,
    NotSeparableError,
    att_svm,
    graph_svm_problem,
    solve_max_margin,
)
from skntp.svm._graph import cyclic_correction


# --------------------------------------------------------------------------
# AttentionSelector
# --------------------------------------------------------------------------
def test_diagnose_selection_reports_other_for_a_dominated_selection():
    # token 1 is optimal (score 1) but the query selects token 0 (score 0), whose only
    # SVM-neighbor is token 1: saturated, neither optimal nor locally optimal
    K = np.array([[[1.0, 0.0], [0.0, 0.0]]])
    rep = diagnose_selection(K, np.array([[0.0, 1.0]]), np.array([100.0, 0.0]))
    assert rep["saturated"] and rep["selected"].tolist() == [0]
    np.testing.assert_allclose(rep["mm"], [1.0, 0.0], atol=1e-9)
    assert rep["min_score_gap"] == -1.0 and not rep["locally_optimal"]
    assert rep["convergence"] == "other" and not rep["selects_optimal"]
    assert rep["correlation"] == pytest.approx(1.0)


def test_selector_label_and_head_edge_cases():
    D = make_attention_fig1c()
    with pytest.raises(ValueError, match=r"classes must name exactly 2 labels, got \[1\]"):
        AttentionSelector(D.head, classes=[1]).fit(D.X, D.y)
    with pytest.raises(ValueError, match=r"labels array\(\[5\]\) are not in"):
        AttentionSelector(D.head, classes=[-1, 1]).fit(D.X, [1, 5, -1])
    with pytest.raises(ValueError, match="init contains NaN or infinity"):
        AttentionSelector(D.head, init=[np.nan, 0.0, 0.0], classes=[-1, 1]).fit(
            D.X, D.y)
    # no head given and equal class means: the head falls back to e_1
    X = np.array([[[1.0, 2.0], [0.0, 0.0]], [[1.0, 2.0], [0.0, 0.0]]])
    est = AttentionSelector(max_iter=3, compute_limits=False).fit(X, [0, 1])  # no ATT-SVM
    np.testing.assert_array_equal(est.head_, [1.0, 0.0])


def test_selector_svm_refuses_inputs_with_only_optimal_tokens():
    X = np.random.default_rng(0).standard_normal((3, 1, 2))  # one token per input
    with pytest.raises(NotSeparableError, match=r"p\^mm\* is zero"):
        AttentionSelector(np.ones(2), solver="svm", classes=[-1, 1]).fit(X, [1, -1, 1])
    # gradient solvers still fit, from a point where the gradient is zero; no GMM direction
    with pytest.warns(ConvergenceWarning, match="gradient is exactly zero at the initial"):
        est = AttentionSelector(np.ones(2), max_iter=3, classes=[-1, 1]).fit(X, [1, -1, 1])
    assert est.gmm_direction_ is None


def test_selector_regpath_in_key_query_form_follows_the_query_form():
    # Lemma 1: training W with the fixed query u follows training p on the keys X,
    # including the regularization path (radii divided by ||u||)
    D = make_attention_fig1c()
    u = np.array([0.6, 0.8, 0.0])
    radii = [0.5, 2.0, 8.0]
    p = AttentionSelector(D.head, solver="regpath", path_radii=radii, max_iter=200,
                          classes=[-1, 1]).fit(D.X, D.y)
    w = AttentionSelector(D.head, np.zeros((3, 3)), train="W", solver="regpath",
                          path_radii=radii, fixed_query=u, max_iter=200,
                          classes=[-1, 1]).fit(D.X, D.y)
    np.testing.assert_allclose(w.key_query_.T @ u, p.query_, atol=1e-6)
    np.testing.assert_allclose(w.history_["loss"], p.history_["loss"], rtol=1e-8)


# --------------------------------------------------------------------------
# JointAttentionSVM
# --------------------------------------------------------------------------
def test_joint_warns_when_attention_cannot_select_the_tokens():
    # input 0 has two equal tokens: a head SVM exists (v = (0, 1) separates every
    # token choice), but no attention weight can select one of two equal keys
    X = np.array([[[1.0, 1.0], [1.0, 1.0]], [[1.0, -1.0], [0.5, -2.0]],
                  [[0.5, 1.0], [0.3, 2.0]]])
    y = np.array([1.0, -1.0, 1.0])
    with pytest.warns(UserWarning, match="att_svm_direction_ is None"):
        est = JointAttentionSVM(max_iter=20, random_state=0).fit(X, y)
    assert est.head_mm_direction_ is not None and est.att_svm_direction_ is None
    assert np.all(np.isnan(est.history_["att_svm_alignment"]))
    # input 0 is not a support vector of the head SVM: its constraints relax to
    # p^T (k_a - k_t) >= 0, which the equal keys satisfy, so p^relax exists (eq. (10))
    assert 0 not in est.support_ and est.mm_direction_ is not None


def test_joint_regpath_radii_and_verbose_progress(capsys):
    X, y, P = make_joint_fig3("b", return_params=True)
    est = JointAttentionSVM(solver="regpath", path_radii=[0.5, 2.0], max_iter=50,
                            init=(P.head_init, P.query_init)).fit(X, y)
    np.testing.assert_array_equal(est.history_["radius_0"], [0.5, 2.0])
    np.testing.assert_array_equal(est.history_["radius_1"], [0.5, 2.0])
    with pytest.raises(ValueError, match="path_radii must be increasing in every column"):
        JointAttentionSVM(solver="regpath", path_radii=[[1.0, 2.0], [2.0, 1.0]]).fit(X, y)
    # NGD runs on log L; the progress bar shows L itself (no limit: at init the selected
    # tokens admit no head SVM, which would warn)
    JointAttentionSVM(max_iter=5, verbose=1, init=(P.head_init, P.query_init),
                      compute_limits=False).fit(X, y)
    err = capsys.readouterr().err
    fit = JointAttentionSVM(max_iter=5, init=(P.head_init, P.query_init),
                            compute_limits=False).fit(X, y)
    assert "5/5" in err and f"loss {fit.history_['loss'][-1]:.4g}" in err


# --------------------------------------------------------------------------
# NTPAttentionClassifier and NTPDecoderClassifier
# --------------------------------------------------------------------------
def test_self_attention_vocabulary_and_infeasible_graphs():
    with pytest.raises(ValueError, match="the vocabulary needs at least 2 tokens; got "
                       "n_tokens=1"):
        NTPAttentionClassifier(n_tokens=1).fit([[0, 0]], [0])
    # tokens 0 and 1 share an embedding but must be separated: Graph-SVM is infeasible;
    # gradient solvers warn and fit without a direction
    E = np.eye(3)[[0, 0, 1]]
    # and the data break the theory's assumptions, each with its warning
    with pytest.warns(UserWarning, match="Graph-SVM is infeasible.*mm_direction_ is None"), \
            pytest.warns(UserWarning, match="head violates Assumption 3"), \
            pytest.warns(UserWarning, match=r"sample\(s\) .* are not realizable"), \
            pytest.warns(ConvergenceWarning, match="gradient is exactly zero at the initial"):
        est = NTPAttentionClassifier(E, head="embeddings", max_iter=3).fit(
            [[1, 2], [0, 2]], [0, 2])
    assert est.mm_direction_ is None and np.isnan(est.alignment_)
    # a general head: probabilities are softmax of the outputs
    X, y, E = make_token_priority_data(6, 8, 5, 4, acyclic=True, random_state=0)
    clf = NTPAttentionClassifier(E, head="embeddings", loss="ce", max_iter=5).fit(X, y)
    out = clf.decision_function(X)
    np.testing.assert_allclose(clf.predict_proba(X),
                               np.exp(out) / np.exp(out).sum(axis=1, keepdims=True))


def test_decoder_vocabulary_and_soft_label_edge_cases():
    X = np.eye(3)
    with pytest.raises(ValueError, match="the vocabulary needs at least 2 tokens"):
        NTPDecoderClassifier(vocabulary=["a", "a"]).fit(X, ["a", "a", "a"])
    with pytest.raises(ValueError, match="soft labels need at least 2 columns"):
        NTPDecoderClassifier().fit(X, sp.csr_matrix(np.ones((3, 1))))
    with pytest.raises(ValueError, match="soft labels have 2 columns but the vocabulary"):
        NTPDecoderClassifier(vocabulary=3).fit(X, np.ones((3, 2)))


# --------------------------------------------------------------------------
# the core: declines, limits and degenerate programs
# --------------------------------------------------------------------------
def test_att_svm_accepts_a_single_input_as_2d_keys():
    K = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    np.testing.assert_allclose(att_svm(K, [0]), att_svm(K[None], [0]), rtol=1e-12)


def test_nnls_iteration_limit_lets_the_next_method_decide(monkeypatch):
    def failing(*args, **kwargs):
        raise RuntimeError("Maximum number of iterations reached.")

    monkeypatch.setattr(least_distance, "nnls", failing)
    K = np.random.default_rng(1).standard_normal((4, 3, 5))
    problem = att_svm_problem_from(K)
    assert nnls_working_set.solve(problem, 1e-8, 100, None, 0) is None
    monkeypatch.setattr(least_distance, "nnls", scipy_nnls)
    assert nnls_working_set.solve(problem, 1e-8, 100, None, 0).method == "nnls"


def att_svm_problem_from(K):
    from skntp.svm import att_svm_problem

    selected = np.argmax(K @ np.ones(K.shape[2]), axis=1)
    return att_svm_problem(K, selected)


def test_nnls_declines_programs_it_cannot_solve():
    K = np.random.default_rng(2).standard_normal((2, 2, 3))
    eq = MaxMarginProblem(KeyScores(K), Constraints([0], [0], [1], [0.0], [True]))
    assert nnls_working_set.solve(eq, 1e-8, 100, None, 0) is None
    big = MaxMarginProblem(KeyScores(np.zeros((1, 2, nnls_working_set.MAX_DIM + 1))),
                           Constraints([0], [0], [1], [1.0], [False]))
    assert nnls_working_set.solve(big, 1e-8, 100, None, 0) is None
    empty = dual_active_set._dual_active_set(least_distance.KeyRows(MaxMarginProblem(
        KeyScores(K), Constraints([], [], [], [], []))), np.zeros(0), 3)
    np.testing.assert_array_equal(empty[0], np.zeros(3))
    assert empty[1].shape == (0,) and empty[2] == 0


def test_graph_ldp_declines_and_detects_ties_that_leave_zero():
    X, y, E = make_token_priority_data(6, 6, 6, 4, acyclic=False, random_state=2)
    from skntp.graphs import token_priority_graphs

    problem = graph_svm_problem(E, token_priority_graphs(X, y))
    # the method takes any small Frobenius program with homogeneous equalities, not
    # only those built as Graph-SVM
    other = MaxMarginProblem(problem.scores, problem.constraints)
    try:
        ours = least_distance.solve(other, 1e-8, 100, None, 0)
    except NotSeparableError:
        ours = None
    if ours is not None:
        np.testing.assert_allclose(ours.primal, least_distance.solve(problem, 1e-8, 100, None,
                                                                     0).primal)
    c = problem.constraints
    shifted = MaxMarginProblem(problem.scores, Constraints(
        c.block, c.pos, c.ref, np.where(c.equality, 1.0, c.rhs), c.equality),
        info={"graph_svm": True})
    if c.equality.any():  # non-zero right-hand sides on ties: not this method's program
        assert least_distance.solve(shifted, 1e-8, 100, None, 0) is None
    # one-dimensional W, scores e_t W with e = (1, 2): the tie S_1 = S_0 forces W = 0,
    # which cannot satisfy the strict S_0 - S_1 >= 1
    from skntp.svm import BilinearScores

    tie = MaxMarginProblem(BilinearScores(np.ones((1, 1)), np.array([[1.0], [2.0]])),
                           Constraints([0, 0], [1, 0], [0, 1], [0.0, 1.0], [True, False]),
                           name="Graph-SVM", info={"graph_svm": True})
    with pytest.raises(NotSeparableError, match=r"the equalities \(ties\) leave W = 0 only"):
        least_distance.solve(tie, 1e-8, 100, None, 0)


def test_self_attention_risk_refuses_unknown_losses_and_cyclic_left_out_samples():
    X, y, E = make_token_priority_data(4, 4, 3, 3, acyclic=True, random_state=0)
    from skntp.graphs import check_token_sequences

    ids, mask, last = check_token_sequences(X)
    with pytest.raises(ValueError, match=r"loss must be one of \('log', 'ce', 'squared'\)"):
        SelfAttentionRisk(get_backend(), E, np.eye(4), ids, mask, last, y, loss="hinge")


def test_cyclic_correction_warns_when_the_minimizer_is_not_finite():
    # the squared loss with C E^T = 2 I: tokens of the label's SCC can overshoot u = 1,
    # so the cyclic risk has no exact stationary point within the iteration budget
    X, y, E = make_token_priority_data(6, 8, 6, 4, acyclic=False, random_state=5)
    sccs = NTPAttentionClassifier(E, max_iter=1).fit(X, y).sccs_
    with pytest.warns(Warning, match="cyclic correction: the risk of the cyclic "
                      "sub-dataset was minimized to a gradient norm"):
        cyclic_correction(E, X, y, sccs, gamma=np.full((6, 6), 0.5) + 0.5 * np.eye(6),
                          loss="squared", max_iter=1, tol=1e-30)


# --------------------------------------------------------------------------
# small utilities
# --------------------------------------------------------------------------
def test_progress_bar_close_and_calls_after_the_end():
    stream = io.StringIO()
    bar = ProgressBar(10, stream=stream, min_interval=1e9)
    bar(1, 1.0)  # not a terminal: full lines only every line_interval (10 s)
    bar(2, 0.5)
    bar.close()  # writes the pending last state, once, as a stopped run
    text = stream.getvalue()
    assert text.count("\n") == 1 and text.endswith("(stopped)\n") and "\r" not in text
    assert "2/10" in text and "loss 0.5 " in text
    bar(3, 0.1)  # a closed bar draws nothing
    bar.close()
    assert stream.getvalue() == text


def test_backend_conversions():
    torch = pytest.importorskip("torch")
    be = get_backend("torch")
    t = torch.ones(2, dtype=torch.float32)
    out = be.asarray(t)
    assert out.dtype == torch.float64 and out.device == be.device
    assert be.xp.maximum(0.5, torch.tensor([0.0, 1.0], dtype=torch.float64)).tolist() == [
        0.5, 1.0]
    np.testing.assert_array_equal(to_numpy([1, 2]), np.array([1, 2]))
    core = MaxMarginProblem(KeyScores(np.ones((1, 1, 1))),
                            Constraints([0], [0], [-1], [1.0], [False]))
    assert solve_max_margin(core, method="cvxpy").primal.shape == (1,)
