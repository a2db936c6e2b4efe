"""skntp.plotting, the progress bar, the real-text data and the command line."""

import io
import subprocess
import sys
import warnings

import numpy as np
import pytest

from skntp import NTPDecoderClassifier
from skntp._progress import ProgressBar, make_progress
from skntp.datasets import load_text_ntp, make_ntp_2d_example, make_ntp_data


def test_import_skntp_does_not_import_matplotlib():
    code = ("import sys, skntp, skntp.datasets, skntp.plotting, skntp.svm; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"


@pytest.fixture(scope="module")
def small_fit():
    X, y = make_ntp_data(n_samples=300, n_contexts=8, n_features=12, n_tokens=5,
                         support_size=3, random_state=0)
    return NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=300, record_every=10,
                                random_state=0).fit(X, y)


@pytest.fixture(scope="module")
def plt():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    yield plt
    plt.close("all")


def test_training_curves(plt, small_fit):
    from skntp.plotting import plot_training_curves

    axes = plot_training_curves([small_fit, small_fit.history_], labels=["est", "dict"])
    assert len(axes) == 4 and len(axes[0].figure.axes) == 4
    loss_ax, _, align_ax, dist_ax = axes
    # the entropy line is drawn at H, both runs and both alignments are drawn
    assert any(np.allclose(line.get_ydata(), small_fit.entropy_)
               for line in loss_ax.get_lines())
    assert len([ln for ln in align_ax.get_lines() if len(ln.get_xdata())]) == 4
    assert dist_ax.get_yscale() == "log"
    with pytest.raises(ValueError, match="labels"):
        plot_training_curves([small_fit], labels=["a", "b"])
    with pytest.raises(ValueError, match="history_"):
        plot_training_curves([object()])
    with pytest.raises(ValueError, match="unknown panel"):
        plot_training_curves(small_fit, keys=["speed"])


def test_svm_fit_is_a_reference_line_in_the_users_grid(plt, small_fit):
    from skntp.plotting import TrainingCurvesDisplay, plot_training_curves

    X, y = make_ntp_data(n_samples=300, n_contexts=8, n_features=12, n_tokens=5,
                         support_size=3, random_state=0)
    svm = NTPDecoderClassifier(solver="svm").fit(X, y)
    fig, grid = plt.subplots(2, 2)
    axes = plot_training_curves([small_fit, svm], keys=["loss", "alignment"],
                                ax=grid[1])
    assert all(a is b for a, b in zip(axes, grid[1]))
    loss_ax, align_ax = axes
    names = [t.get_text() for t in align_ax.get_legend().get_texts()]
    assert names[:2] == ["ngd", "svm (limit)"]
    limit = [ln for ln in align_ax.get_lines() if ln.get_label() == "svm (limit)"][0]
    # a horizontal line across the axes at the limit's alignment, x in axes units
    assert np.allclose(limit.get_ydata(), svm.history_["alignment"][0])
    assert list(limit.get_xdata()) == [0, 1]
    # the GD curve sets the x range (no point at iteration 1 stretched out)
    assert loss_ax.get_xlim()[1] >= small_fit.n_iter_
    disp = TrainingCurvesDisplay.from_estimator([small_fit, svm], keys=["norm"])
    assert disp.limits == [False, True] and len(disp.lines_["svm"]) == 0
    disp.plot(keys=["loss"], ax=grid[0, 0])
    assert disp.axes_[0] is grid[0, 0]
    with pytest.raises(ValueError, match="2 panel"):
        plot_training_curves(small_fit, keys=["loss", "norm"], ax=grid[0, 0])


def test_metric_over_trials(plt):
    from skntp.plotting import plot_metric_over_trials

    it = np.arange(0, 50, 10.0)
    runs = [{"iteration": it, "alignment": np.linspace(0, 1, 5) * s} for s in (0.5, 1.0)]
    runs.append({"iteration": it[:3], "alignment": np.array([0.0, 0.2, 0.4])})  # stopped
    ax = plot_metric_over_trials(runs, band=(0.0, 1.0), label="mean")
    mean = ax.get_lines()[0].get_ydata()
    np.testing.assert_allclose(mean, [0.0, (0.125 + 0.25 + 0.2) / 3,
                                      (0.25 + 0.5 + 0.4) / 3, (0.375 + 0.75 + 0.4) / 3,
                                      (0.5 + 1.0 + 0.4) / 3])
    assert len(ax.collections) == 1  # the min-max band
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "mean", "min-max of the trials"]
    with pytest.raises(ValueError, match="no 'finite_distance'"):
        plot_metric_over_trials(runs, key="finite_distance")


def test_word_embeddings_shared_rows_and_context_order(plt):
    from skntp.plotting import (
        WordEmbeddingDisplay,
        plot_decoder_rows,
        plot_next_token_matrix,
        plot_word_embeddings,
    )

    H, P, w = make_ntp_2d_example()
    svm = NTPDecoderClassifier(solver="svm").fit(H, P, sample_weight=w)
    axes = plot_word_embeddings(svm)
    assert len(axes) == 3 and len(axes[0].figure.axes) == 4  # + the colorbar of P
    by_title = {ax.get_title(): ax for ax in axes}
    mm_texts = {t.get_text() for t in by_title["rows of W^mm (direction)"].texts}
    star_texts = {t.get_text() for t in by_title["rows of W* (finite component)"].texts}
    # words 0 and 4 follow the same contexts: one shared W^mm row, two W* rows
    assert "0,4" in mm_texts and {"0", "4"} <= star_texts
    # the support sets under the contexts (Fig. 1) and the marker shapes in the legend
    assert "S = {0,2,4}" in mm_texts
    legend = [t.get_text() for t in by_title["rows of W^mm (direction)"].get_legend()
              .get_texts()]
    assert legend == ["context h_j (rescaled)", "word row w_z"]
    # contexts_ is sorted (B, A, C here); context_embeddings orders the rows A, B, C
    assert not np.allclose(svm.contexts_, H)
    disp = WordEmbeddingDisplay.from_estimator(svm, context_embeddings=H,
                                               contexts=["A", "B", "C"])
    np.testing.assert_allclose(disp.next_token_probs, P)
    assert [t.get_text() for t in disp.axes_[0].get_yticklabels()] == ["A", "B", "C"]
    fig, grid = plt.subplots(1, 2)
    assert plot_next_token_matrix(svm, ax=grid[0]) is grid[0]
    assert plot_decoder_rows(svm, "finite", ax=grid[1]) is grid[1]
    with pytest.raises(ValueError, match="which"):
        plot_decoder_rows(svm, "star")
    with pytest.raises(ValueError, match="not a context"):
        plot_word_embeddings(svm, context_embeddings=H + 1.0)
    with pytest.raises(ValueError, match="compute_limits"):
        plot_word_embeddings(NTPDecoderClassifier(compute_limits=False, max_iter=2)
                             .fit(H, P, sample_weight=w))


def test_attention_trajectories_and_bars(plt):
    from skntp.plotting import (
        AttentionTrajectoryDisplay,
        plot_attention_trajectories,
        plot_fig9_bars,
    )

    t = np.linspace(0, 1, 20)[:, None]
    traj = np.hstack([t, 1 - t, 0 * t]) + 0.1
    X = np.array([[[1.0, 0.0, 1.0], [0.0, 1.0, -1.0]], [[0.5, 0.5, 0.0], [1.0, 1.0, 1.0]]])
    ax = plot_attention_trajectories([traj, {"query": traj}], X,
                                     directions={"GMM": np.array([1.0, 0.0, 0.0])})
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    # runs, directions, then one marker shape per input
    assert names == ["init 0", "init 1", "GMM", "tokens of input 0", "tokens of input 1"]
    markers = [h.get_marker() for h in ax.get_legend().legend_handles[-2:]]
    assert markers == ["o", "s"]
    fig, grid = plt.subplots(1, 2)
    disp = AttentionTrajectoryDisplay.from_estimator(traj, ax=grid[1], title="mine")
    assert disp.ax_ is grid[1] and grid[1].get_title() == "mine"
    with pytest.raises(ValueError, match="'query'"):
        plot_attention_trajectories({"loss": np.ones(3)})
    axes = plot_fig9_bars([2, 10], [0.8, 0.0], [0.2, 1.0], [0.1, 0.5],
                          gaps={2: np.array([0.1, -0.01]), 10: np.array([0.3])})
    assert len(axes) == 2
    heights = sorted(round(p.get_height(), 3) for p in axes[0].patches)
    assert heights == sorted([0.8, 0.0, 0.2, 1.0, 0.1, 0.5])
    assert plot_fig9_bars([2], [0.5], [0.5], [0.2], ax=grid[0])[0] is grid[0]
    with pytest.raises(ValueError, match="one fraction per dimension"):
        plot_fig9_bars([2, 10], [0.8], [0.2, 1.0], [0.1, 0.5])
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        plot_fig9_bars([2], [1.5], [0.2], [0.1])


def test_token_priority_graphs(plt):
    from skntp.graphs import token_priority_graphs
    from skntp.plotting import plot_token_priority_graphs

    X = np.array([[0, 1, 2], [1, 0, 2], [2, 3, 3]])
    y = np.array([1, 0, 3])
    graphs = token_priority_graphs(X, y)
    axes = plot_token_priority_graphs(graphs, token_names=list("abcd"))
    titles = [ax.get_title() for ax in axes]
    assert len(titles) == len(graphs) == len(axes)
    assert any("1 cyclic" in t for t in titles)  # tokens 0 and 1 follow each other
    assert "G^(c)" in titles[0]
    legend = [t.get_text() for t in axes[0].get_legend().get_texts()]
    assert legend[:2] == ["i => j (across SCCs)", "i ~ j (same SCC)"]
    fig, grid = plt.subplots(1, len(graphs))
    assert list(plot_token_priority_graphs(graphs, ax=grid)) == list(grid)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_text():
    stream = _Terminal()
    bar = ProgressBar(10, desc="gd", stream=stream, min_interval=0.0)
    for k in range(1, 11):
        bar(k, 1.0 / k, {"alignment": 0.75, "alignment_uncorrected": 0.5})
    text = stream.getvalue()
    assert text.count("\r") == 10 and text.endswith("\n")
    last = text.split("\r")[-1]
    assert "10/10" in last and "loss 0.1" in last and "cos(w-w*,mm) 0.7500" in last
    assert "eta" in text.split("\r")[5] and "eta" not in last
    assert make_progress(0, 10) is None
    # per-trial (batched) rows are averaged
    stream = _Terminal()
    ProgressBar(1, stream=stream)(1, np.array([1.0, 3.0]), {"alignment": np.array([0.2, 0.4])})
    assert "loss 2" in stream.getvalue() and "0.3000" in stream.getvalue()


def test_decoder_verbose_prints_progress(capsys, small_fit):
    X, y = make_ntp_data(n_samples=100, n_contexts=5, n_features=8, n_tokens=4,
                         support_size=2, random_state=1)
    NTPDecoderClassifier(solver="gd", max_iter=50, verbose=1).fit(X, y)
    err = capsys.readouterr().err
    assert "50/50" in err and "loss" in err and "cos(w-w*,mm)" in err
    assert "limit NTP-SVM: it=" in err and "\r" not in err  # not a terminal: plain lines
    NTPDecoderClassifier(solver="gd", max_iter=50, verbose=0).fit(X, y)
    assert capsys.readouterr().err == ""


def test_load_text_ntp():
    b = load_text_ntp(n_words=15)
    X, y = b.data, b.target
    m = len(set(b.contexts))
    assert X.shape == (len(y), m + 8) and len(b.contexts) == len(y)
    assert set(y) <= set(b.vocabulary) and len(b.vocabulary) == 15
    assert all(1 <= len(c) <= 2 and set(c) <= set(b.vocabulary) for c in b.contexts)
    # same context -> same embedding; different contexts -> different embeddings
    assert np.unique(X, axis=0).shape[0] == m
    X2, y2 = load_text_ntp(n_words=15, return_X_y=True)
    np.testing.assert_array_equal(X, X2)
    # d > m generic: NTP-separable and NTP_H-compatible (checked on the cvxpy path)
    est = NTPDecoderClassifier(solver="svm", svm_method="cvxpy").fit(X, y)
    assert est.is_ntp_separable_ and est.is_ntp_compatible_
    assert est.history_["excess_loss"][-1] < 1e-6
    onehot = load_text_ntp(n_words=15, embedding="onehot")
    assert onehot.data.shape[1] == m
    for bad in ({"embedding": "glove"}, {"context_size": 0}, {"n_words": 1},
                {"n_features": 0}):
        with pytest.raises(ValueError):
            load_text_ntp(**bad)


def test_text_words_with_same_contexts_share_mm_rows():
    b = load_text_ntp(n_words=12, context_size=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = NTPDecoderClassifier(solver="svm", svm_method="cvxpy").fit(b.data, b.target)
    support = np.asarray(est.next_token_probs_) > 0
    cols = {}
    for z, col in enumerate(support.T):
        cols.setdefault(col.tobytes(), []).append(z)
    groups = [g for g in cols.values() if len(g) > 1]
    for g in groups:
        np.testing.assert_allclose(est.mm_direction_[g], est.mm_direction_[[g[0]] * len(g)],
                                   atol=1e-5)


def test_reproduce_help_lists_every_reproduction(capsys):
    from skntp.__main__ import main
    from skntp._reproduce import REPRODUCTIONS

    with pytest.raises(SystemExit) as exc:
        main(["reproduce", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in ("ntp-fig1", "ntp-fig4", "ntp-real-text", "attention-fig1",
                 "attention-fig9", "joint-fig3", "self-attention-figs"):
        assert name in REPRODUCTIONS and name in out


def test_reproduce_ntp_fig1_quick(capsys, tmp_path, plt):
    from skntp.__main__ import main

    out_png = tmp_path / "fig1.png"
    assert main(["reproduce", "ntp-fig1", "--quick", "--plot", str(out_png)]) == 0
    text = capsys.readouterr().out
    assert "words 0 and 4" in text and out_png.stat().st_size > 1000


def test_training_curves_of_batched_histories_on_a_linear_axis(plt):
    from skntp.plotting import plot_training_curves

    hist = {"iteration": np.arange(3.0), "loss": np.array([[1.0, 3.0], [0.5, 1.5],
                                                           [0.2, 0.4]])}
    axes = plot_training_curves(hist, log_x=False, entropy=0.1)
    assert len(axes) == 1  # no norm/alignment/distance in the history: loss only
    ax = axes[0]
    assert ax.get_xscale() == "linear" and ax.get_xlabel() == "iteration"
    line = ax.get_lines()[0]
    np.testing.assert_array_equal(line.get_xdata(), [0.0, 1.0, 2.0])
    np.testing.assert_allclose(line.get_ydata(), [2.0, 1.0, 0.3])  # mean over trials
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_training_curves([])


def test_attention_trajectories_of_fitted_estimators(plt):
    from skntp import AttentionSelector, JointAttentionSVM
    from skntp.datasets import make_attention_fig8, make_joint_fig3
    from skntp.plotting import plot_attention_trajectories

    D = make_attention_fig8()
    est = AttentionSelector(D.head, D.key_query, max_iter=200, init=D.starts["lmm"],
                            classes=[-1, 1]).fit(D.X, D.y)
    ax = plot_attention_trajectories(est, D.X, labels=["lmm start"], title="Fig. 8")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    # the run, then the GMM ray and (different from it) the selected tokens' direction
    assert legend[:3] == ["lmm start", "GMM p^mm*", "p^mm (selected)"]
    assert legend[3:] == ["tokens of input 0", "tokens of input 1"]
    assert ax.get_title() == "Fig. 8" and len(ax.figure.axes) == 2  # with the colorbar
    run = ax.get_lines()[0]
    traj = est.trajectory_["query"][:, :2]
    span = max(1.0, np.abs(D.X @ D.key_query.T).max())
    np.testing.assert_allclose(run.get_xdata(), span * traj[:, 0]
                               / np.linalg.norm(est.trajectory_["query"], axis=1))
    Xj, yj, P = make_joint_fig3("b", return_params=True)
    joint = JointAttentionSVM(init=(P.head_init, P.query_init), max_iter=100).fit(Xj, yj)
    ax = plot_attention_trajectories(joint, key="head")
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "v^mm"
    ax = plot_attention_trajectories(joint)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[-1] == "p^relax"
    with pytest.raises(ValueError, match="nothing to plot"):
        plot_attention_trajectories([])
    with pytest.raises(ValueError, match=r"2-D \(n_iter, d\) array"):
        plot_attention_trajectories(np.ones(3))


def test_token_priority_graphs_of_a_fitted_estimator(plt):
    from skntp import NTPAttentionClassifier
    from skntp.datasets import make_token_priority_data
    from skntp.plotting import plot_token_priority_graphs

    X, y, E = make_token_priority_data(6, 8, 12, 4, acyclic=False, random_state=1)
    clf = NTPAttentionClassifier(E, max_iter=5).fit(X, y)
    names = [f"t{i}" for i in range(6)]
    axes = plot_token_priority_graphs(clf, max_graphs=2, token_names=names)
    titled = [ax for ax in np.ravel(axes) if ax.get_title()]
    k = sorted(clf.graphs_)[:2]
    assert [ax.get_title().split(":")[0] for ax in titled] == [f"G^(t{j})" for j in k]
    labels = {t.get_text() for t in titled[0].texts}
    assert labels == {names[v] for v in clf.graphs_[k[0]].nodes}
    with pytest.raises(ValueError, match="fitted NTPAttentionClassifier or a dict"):
        plot_token_priority_graphs(object())
    with pytest.raises(ValueError, match="no graphs to draw"):
        plot_token_priority_graphs({})


def test_reproduce_transformers_svm_quick():
    # Thms. 1-2 of "Transformers as SVMs": W -> W^fro, Q K^T -> W^nuc (diagonal dominance)
    from skntp._reproduce import REPRODUCTIONS

    rep = REPRODUCTIONS["transformers-svm"](quick=True)
    fits = rep.data["fits"]
    for parameterization, own, other in (("W", "fro", "nuclear"), ("KQ", "nuclear", "fro")):
        own_cos = np.mean([e.limit_alignments_[own] for e in fits[parameterization]])
        other_cos = np.mean([e.limit_alignments_[other] for e in fits[parameterization]])
        assert own_cos > 0.95 and own_cos > other_cos + 0.05
    assert "Q K^T" in rep.table and "cos W^nuc" in rep.table


def test_plots_refuse_empty_or_nan_input_by_name():
    # ZeroDivisionError, IndexError or a silent empty figure before
    pytest.importorskip("matplotlib")
    from skntp import NTPDecoderClassifier
    from skntp import plotting as P
    from skntp.datasets import make_ntp_data

    X, y = make_ntp_data(n_samples=300, random_state=0)
    est = NTPDecoderClassifier(max_iter=20, random_state=0).fit(X, y)
    nan = np.array([[np.nan]])
    cases = [
        (lambda: P.plot_training_curves(est, keys=[]), "there is no panel to draw"),
        (lambda: P.plot_training_curves({"iteration": np.array([]), "loss": np.array([])}),
         "a history has no record"),
        (lambda: P.plot_word_embeddings(est, words=["a"]),
         "words needs one name per token of classes_: 10, got 1"),
        (lambda: P.plot_fig9_bars([], [], [], []), "dims is empty"),
        (lambda: P.plot_fig9_bars([2], [np.nan], [0.5], [0.5]), r"\(and not be NaN\)"),
        (lambda: P.plot_optimizer_norms({"solvers": ["a"], "norms": ["fro"],
                                         "alignment": nan, "margin_fraction": nan}),
         "alignment holds NaN"),
        (lambda: P.plot_optimizer_norms({"solvers": [], "norms": [], "alignment":
                                         np.zeros((0, 0)), "margin_fraction": np.zeros((0, 0))}),
         "at least one optimizer and one norm"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()


def test_training_curve_legends_are_readable_and_cover_no_curve(plt, small_fit):
    from skntp.plotting import plot_training_curves

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    plot_training_curves([small_fit], ax=axes.ravel())
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [a for a in axes.ravel() if a.get_legend() is not None]
    assert len(legends) == 2  # the loss and the alignment panels
    for ax in legends:
        legend = ax.get_legend()
        assert min(t.get_fontsize() for t in legend.get_texts()) >= 9
        box, data = legend.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert box.y1 < data.y0  # below the panel's data area, where no curve is
        assert box.y0 >= fig.bbox.y0  # and inside the figure
