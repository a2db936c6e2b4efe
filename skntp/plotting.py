"""Plots of fitted skntp estimators and their histories (needs matplotlib).

matplotlib is an optional dependency (``pip install 'skntp[plot]'``); it is
imported inside each function, so ``import skntp`` never imports it.  Every
function takes fitted estimators (or their ``history_`` dicts, or plain
arrays) and returns the :class:`matplotlib.figure.Figure` it drew.

* :func:`plot_training_curves` -- NTP paper Fig. 4/5: loss against the
  entropy bound, norm, alignment (raw and corrected), finite-component
  distance, against iterations.
* :func:`plot_word_embeddings` -- NTP paper Fig. 1/2: the next-token
  matrix ``P`` and the rows of ``W^mm`` and ``W*`` as word embeddings.
* :func:`plot_attention_trajectories` -- max-margin paper Fig. 1/3/8: the
  trajectory of the attention query ``p`` in 2-D with the GMM/LMM (or
  ``p^relax``) directions and the tokens' keys.
* :func:`plot_token_priority_graphs` -- self-attention paper Fig. 2: the
  token-priority graphs with their strongly connected components.
* :func:`plot_fig9_bars` -- max-margin paper Fig. 9: what GD converges to
  over random trials, per dimension.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "plot_attention_trajectories",
    "plot_fig9_bars",
    "plot_token_priority_graphs",
    "plot_training_curves",
    "plot_word_embeddings",
]

_INSTALL = "pip install 'skntp[plot]'"


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            f"skntp.plotting needs matplotlib, which is not installed: {_INSTALL}"
        ) from exc
    return plt


def _history(obj):
    """``obj.history_`` for a fitted estimator, ``obj`` for a dict."""
    if isinstance(obj, dict):
        return obj
    hist = getattr(obj, "history_", None)
    if hist is None:
        raise ValueError(
            f"{type(obj).__name__} has no history_: pass a fitted estimator or its "
            "history_ dict."
        )
    return hist


def _as_list(objs):
    return list(objs) if isinstance(objs, (list, tuple)) else [objs]


def _labels(labels, n, prefix="run"):
    if labels is None:
        return [f"{prefix} {i}" for i in range(n)] if n > 1 else [None]
    labels = list(labels)
    if len(labels) != n:
        raise ValueError(f"got {len(labels)} labels for {n} runs.")
    return labels


def _trial_mean(values):
    """Per-record values; the mean over trials for batched histories (n_records, n_trials)."""
    values = np.asarray(values, dtype=float)
    return values.mean(axis=1) if values.ndim == 2 else values


# ---------------------------------------------------------------------------
# NTP paper, Fig. 4/5
# ---------------------------------------------------------------------------
def plot_training_curves(estimators_or_histories, labels=None, *, entropy=None,
                         log_x=True):
    """Training curves in the style of the NTP paper's Fig. 4/5.

    Four panels against the iteration: (a) the loss and the entropy lower
    bound ``H`` (the loss converges to ``H``, Thm. 4.1); (b) the parameter
    norm (diverges); (c) the alignment ``cos(W, W^mm)`` (solid) and the
    corrected alignment ``cos(W - W*, W^mm)`` (dashed), both converging to 1;
    (d) the finite-component distance ``||P_F(W) - W*||`` (converges to 0).
    Panels whose key is missing from every history are left out, so the
    function also draws attention histories (loss, norm, alignment).

    Parameters
    ----------
    estimators_or_histories : estimator, dict, or list of them
        Fitted estimators with ``history_`` or the dicts themselves
        (``iteration`` and ``loss`` keys at least; batched per-trial
        histories are averaged over trials).
    labels : list of str, optional
        One legend label per run.
    entropy : float, optional
        The entropy bound ``H``; read from the first estimator's
        ``entropy_`` when omitted.
    log_x : bool, default=True
        Logarithmic iteration axis (as in the paper).

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    runs = _as_list(estimators_or_histories)
    if not runs:
        raise ValueError("nothing to plot: pass at least one estimator or history.")
    hists = [_history(r) for r in runs]
    labels = _labels(labels, len(hists))
    if entropy is None:
        entropy = next((getattr(r, "entropy_", None) for r in runs
                        if getattr(r, "entropy_", None) is not None), None)
    panels = [("loss", "loss (CE)")]
    if any("norm" in h for h in hists):
        panels.append(("norm", "norm of the parameter"))
    if any("alignment" in h or "alignment_corrected" in h for h in hists):
        panels.append(("alignment", "correlation with the max-margin direction"))
    if any("finite_distance" in h for h in hists):
        panels.append(("finite_distance", "distance to the finite component"))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.2),
                             squeeze=False)
    axes = axes[0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (hist, label) in enumerate(zip(hists, labels)):
        c = colors[i % len(colors)]
        it = np.asarray(hist["iteration"], dtype=float)
        x = it + 1 if log_x else it
        for ax, (key, _) in zip(axes, panels):
            if key == "alignment":
                if "alignment" in hist:
                    ax.plot(x, _trial_mean(hist["alignment"]), color=c, label=label)
                if "alignment_corrected" in hist:
                    ax.plot(x, _trial_mean(hist["alignment_corrected"]), color=c, ls="--")
            elif key in hist:
                ax.plot(x, _trial_mean(hist[key]), color=c, label=label)
    for ax, (key, title) in zip(axes, panels):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("iteration + 1" if log_x else "iteration")
        if log_x:
            ax.set_xscale("log")
        ax.grid(alpha=0.3)
        if key == "loss" and entropy is not None:
            ax.axhline(entropy, color="k", ls=":", label=f"entropy H = {entropy:.3f}")
        if key == "alignment":
            ax.set_ylim(min(-0.05, ax.get_ylim()[0]), 1.05)
            ax.plot([], [], color="gray", label="cos(W, W^mm)")
            ax.plot([], [], color="gray", ls="--", label="cos(W - W*, W^mm)")
        if key == "finite_distance":
            ax.set_yscale("log")
    axes[0].legend(fontsize=7)
    for ax, (key, _) in zip(axes, panels):
        if key == "alignment":
            ax.legend(handles=ax.get_lines()[-2:], fontsize=7)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# NTP paper, Fig. 1/2
# ---------------------------------------------------------------------------
def _plane(rows):
    """A 2-D orthonormal basis: the identity for d = 2, else the top-2 PCs of the rows."""
    if rows.shape[1] == 2:
        return np.eye(2)
    _, _, vt = np.linalg.svd(rows - rows.mean(axis=0), full_matrices=False)
    return vt[:2].T


def plot_word_embeddings(fitted_decoder, words=None, contexts=None, *, max_words=30,
                         max_contexts=12):
    """Decoder rows as word embeddings, the NTP paper's Fig. 1/2.

    Three panels: (left) the next-token matrix ``P`` of the distinct contexts
    (rows) and words (columns), off-support entries black; (middle) the rows
    ``w_z`` of ``W^mm`` (``mm_direction_``), which depend only on the support
    sets (words that follow the same contexts share their row); (right) the
    rows of the finite component ``W*`` (``finite_component_``), which encode
    the in-support log-odds.  The context embeddings are drawn as black dots
    (rescaled to the rows' extent; only when there are at most
    ``max_contexts``).  For ``d > 2`` the rows are normalized (their
    directions are compared) and projected on the top two principal
    directions of the shown rows (one plane per panel).

    Parameters
    ----------
    fitted_decoder : NTPDecoderClassifier
        Fitted with ``compute_limits=True`` on NTP-separable data.
    words : list of str, optional
        Names of the words (default: ``classes_``).
    contexts : list of str, optional
        Names of the distinct contexts (default: A, B, C, ... for up to 26).
    max_words : int, default=30
        Draw at most that many words in the embedding panels (the most
        frequent next tokens).
    max_contexts : int, default=12
        Draw the contexts only when there are at most that many.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    for attr in ("mm_direction_", "finite_component_", "next_token_probs_", "contexts_"):
        if getattr(fitted_decoder, attr, None) is None:
            raise ValueError(
                f"the decoder has no {attr}: fit it with compute_limits=True on "
                "NTP-separable data."
            )
    P = fitted_decoder.next_token_probs_
    P = P.toarray() if hasattr(P, "toarray") else np.asarray(P)
    H = np.asarray(fitted_decoder.contexts_, dtype=float)
    m, V = P.shape
    words = [str(c) for c in fitted_decoder.classes_] if words is None else list(words)
    if contexts is None:
        contexts = [chr(65 + j) for j in range(m)] if m <= 26 else [str(j) for j in range(m)]
    weights = np.asarray(fitted_decoder.context_weights_, dtype=float)
    shown = np.argsort(-(weights @ P), kind="stable")[:max_words]
    color_of = {z: rank for rank, z in enumerate(sorted(shown))}
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.2))
    ax = axes[0]
    masked = np.ma.masked_where(P <= 0, P)
    cmap = plt.get_cmap("viridis").with_extremes(bad="black")
    im = ax.imshow(masked, cmap=cmap, aspect="auto", vmin=0, interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046)
    ax.set_title("P: next-token probabilities", fontsize=10)
    ax.set_xlabel("word")
    ax.set_ylabel("context")
    if V <= 30:
        ax.set_xticks(range(V), words, rotation=90 if max(map(len, words)) > 2 else 0)
    if m <= 30:
        ax.set_yticks(range(m), contexts)
    colors = plt.get_cmap("tab10" if V <= 10 else "tab20")
    for ax, W, title in ((axes[1], fitted_decoder.mm_direction_, "rows of W^mm (direction)"),
                         (axes[2], fitted_decoder.finite_component_,
                          "rows of W* (finite component)")):
        W = np.asarray(W, dtype=float)
        if W.shape[1] > 2:  # compare directions (cosines) of the rows
            nrm = np.linalg.norm(W, axis=1, keepdims=True)
            W = W / np.where(nrm > 0, nrm, 1.0)
        basis = _plane(W[shown])
        w2, h2 = W @ basis, H @ basis
        scale = max(np.abs(w2[shown]).max(), 1e-12) / max(np.abs(h2).max(), 1e-12)
        hs = h2 * scale if m <= max_contexts else np.zeros((0, 2))
        ax.scatter(hs[:, 0], hs[:, 1], c="k", s=25, zorder=3)
        if m <= max_contexts:
            for j in range(m):
                ax.annotate(contexts[j], hs[j], textcoords="offset points", xytext=(4, 4),
                            fontsize=8)
        tol = 1e-6 * max(np.abs(w2).max(), 1e-12)
        named = {}  # words with the same 2-D row share one label ("0,4")
        for z in shown:
            key = tuple(np.round(w2[z] / tol).astype(np.int64))
            named.setdefault(key, []).append(z)
        for group in named.values():
            z = group[0]
            col = colors(color_of[z] % colors.N)
            ax.annotate("", xy=w2[z], xytext=(0, 0),
                        arrowprops={"arrowstyle": "->", "color": col, "lw": 1.2})
            ax.scatter(*w2[z], marker="*", color=col, s=60, zorder=4)
            ax.annotate(",".join(words[g] for g in group), w2[z], textcoords="offset points",
                        xytext=(3, -10), fontsize=8, color=col)
        lim = 1.15 * max(np.abs(w2[shown]).max(), np.abs(hs).max(initial=0.0), 1e-12)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.axhline(0, color="0.85", lw=0.8, zorder=0)
        ax.axvline(0, color="0.85", lw=0.8, zorder=0)
        plane = "" if W.shape[1] == 2 else "\n(unit rows, top-2 PCs)"
        ax.set_title(title + plane, fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Max-margin token selection, Fig. 1/3/8
# ---------------------------------------------------------------------------
def _trajectory(obj, key):
    hist = _history(obj) if not isinstance(obj, np.ndarray) else None
    if hist is None:
        traj = np.asarray(obj, dtype=float)
    elif key in hist:
        traj = np.asarray(hist[key], dtype=float)
    else:
        raise ValueError(
            f"the history has no {key!r} entry (the per-iteration parameter); fit the "
            "estimator with its trajectory recorded, or pass the (n_iter, d) array."
        )
    if traj.ndim != 2:
        raise ValueError(f"a trajectory must be a 2-D (n_iter, d) array, got {traj.shape}.")
    return traj


def plot_attention_trajectories(estimators_or_trajectories, X=None, *, key="query",
                                directions=None, dims=(0, 1), labels=None,
                                token_scores=None, ax=None, title=None):
    """Trajectories of the attention query ``p`` in 2-D (max-margin paper Fig. 1/3/8).

    Draws each run's iterates ``p(t)`` (normalized to the unit circle, as
    the paper draws directions: arrows from the start), the max-margin
    directions as rays and, when ``X`` is given, every token's key
    ``k_it = W x_it`` colored by its score ``gamma_it = Y_i v^T x_it``.

    Parameters
    ----------
    estimators_or_trajectories : estimator, dict, ndarray or list of them
        Fitted ``AttentionSelector`` / ``JointAttentionSVM`` (their
        ``history_[key]``), history dicts, or (n_iter, d) arrays.
    X : ndarray of shape (n, T, d), optional
        The inputs, drawn as key positions (``key_query_`` of the first
        estimator applied when it has one, else the identity).
    key : str, default="query"
        The history entry holding the iterates (``"head"`` for ``v``).
    directions : dict of str to ndarray, optional
        Rays to draw, e.g. ``{"GMM": p_mm_star, "LMM": p_mm}``.  By default
        the first estimator's ``gmm_direction_`` (solid) and
        ``mm_direction_`` (dashed, labelled ``p^mm``; ``p^relax`` for the
        joint model) when they exist.
    dims : tuple of two int, default=(0, 1)
        The coordinates shown (the paper's keys use the first two).
    labels : list of str, optional
    token_scores : ndarray of shape (n, T), optional
        Scores for the token colors (default: the first estimator's
        ``token_scores_``).
    ax : matplotlib Axes, optional
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    runs = _as_list(estimators_or_trajectories)
    if not runs:
        raise ValueError("nothing to plot: pass at least one estimator or trajectory.")
    trajs = [_trajectory(r, key) for r in runs]
    labels = _labels(labels, len(trajs), prefix="init")
    first = runs[0]
    dims = list(dims)
    if directions is None:
        directions = {}
        gmm = getattr(first, "gmm_direction_", None)
        if gmm is not None:
            directions["GMM p^mm*"] = gmm
        mm = getattr(first, "mm_direction_", None)
        if mm is not None and key == "query":
            name = "p^relax" if hasattr(first, "head_mm_direction_") else "p^mm (selected)"
            if gmm is None or not np.allclose(np.ravel(mm), np.ravel(gmm), atol=1e-6):
                directions[name] = mm
        head_mm = getattr(first, "head_mm_direction_", None)
        if head_mm is not None and key == "head":
            directions["v^mm"] = head_mm
    if token_scores is None:
        token_scores = getattr(first, "token_scores_", None)
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 5))
    else:
        fig = ax.figure
    if X is not None:
        X = np.asarray(X, dtype=float)
        if X.ndim == 2:
            X = X[None]
        Wk = getattr(first, "key_query_", None)
        K = X if Wk is None else X @ np.asarray(Wk, dtype=float).T
        k2 = K[..., dims].reshape(-1, 2)
        markers = "osD^vP*Xh"
        scores = None if token_scores is None else np.asarray(token_scores, float)
        for i in range(K.shape[0]):
            pts = K[i][:, dims]
            kw = {"c": scores[i], "cmap": "coolwarm", "vmin": -np.abs(scores).max(),
                  "vmax": np.abs(scores).max()} if scores is not None else {"c": "0.4"}
            sc = ax.scatter(pts[:, 0], pts[:, 1], marker=markers[i % len(markers)], s=60,
                            edgecolors="k", zorder=3, **kw)
        if scores is not None:
            fig.colorbar(sc, ax=ax, fraction=0.046, label="token score gamma")
        span = max(1.0, np.abs(k2).max())
    else:
        span = 1.0
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (traj, label) in enumerate(zip(trajs, labels)):
        t2 = traj[:, dims]
        nrm = np.linalg.norm(traj, axis=1, keepdims=True)
        u = span * t2 / np.where(nrm > 0, nrm, 1.0)
        c = colors[i % len(colors)]
        ax.plot(u[:, 0], u[:, 1], color=c, lw=1.5, label=label)
        ax.annotate("", xy=u[-1], xytext=u[max(0, len(u) - 2)],
                    arrowprops={"arrowstyle": "-|>", "color": c})
        ax.scatter(*u[0], color=c, marker="o", s=20, zorder=4)
    styles = ["-", "--", ":", "-."]
    for j, (name, direction) in enumerate(directions.items()):
        dvec = np.ravel(np.asarray(direction, dtype=float))[dims]
        n = np.linalg.norm(np.ravel(direction))
        if n == 0:
            continue
        ray = 1.3 * span * dvec / n
        ax.plot([0, ray[0]], [0, ray[1]], color="k", ls=styles[j % len(styles)], lw=1.2,
                label=name)
    lim = 1.45 * span
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel(f"coordinate {dims[0]}")
    ax.set_ylabel(f"coordinate {dims[1]}")
    ax.set_title(title or f"trajectories of {key} / ||{key}||", fontsize=10)
    ax.legend(fontsize=7, loc="lower left")
    return fig


# ---------------------------------------------------------------------------
# Self-attention for NTP, Fig. 2
# ---------------------------------------------------------------------------
def plot_token_priority_graphs(estimator_or_graphs, sccs=None, *, max_graphs=8,
                               token_names=None, seed=0):
    """Token-priority graphs with their SCCs (self-attention paper Fig. 2).

    One panel per last token ``k``: the graph ``G^(k)`` with edges
    ``label -> token``; nodes colored by strongly connected component
    (singletons grey), edges inside an SCC dashed red (``i ~ j``), edges
    between components solid (``i => j``).

    Parameters
    ----------
    estimator_or_graphs : NTPAttentionClassifier or dict
        A fitted estimator (``graphs_``, ``sccs_``) or a dict
        ``last token -> networkx.DiGraph``.
    sccs : dict, optional
        ``last token -> list of sets`` (computed when omitted).
    max_graphs : int, default=8
        Draw at most that many graphs (the first last tokens).
    token_names : sequence of str, optional
        Node labels.
    seed : int, default=0
        Seed of the layout.

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    from .graphs import draw_token_priority_graph, strongly_connected_components

    if isinstance(estimator_or_graphs, dict):
        graphs = estimator_or_graphs
    else:
        graphs = getattr(estimator_or_graphs, "graphs_", None)
        if graphs is None:
            raise ValueError("pass a fitted NTPAttentionClassifier or a dict of graphs.")
        if sccs is None:
            sccs = getattr(estimator_or_graphs, "sccs_", None)
    if not graphs:
        raise ValueError("there are no graphs to draw.")
    if sccs is None:
        sccs = strongly_connected_components(graphs)
    keys = sorted(graphs)[:max_graphs]
    ncols = min(4, len(keys))
    nrows = -(-len(keys) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.2 * ncols, 3.2 * nrows), squeeze=False)
    for ax, k in zip(axes.ravel(), keys):
        names = None
        if token_names is not None:
            names = {v: token_names[v] for v in graphs[k].nodes}
        draw_token_priority_graph(graphs[k], sccs[k], ax=ax, labels=names, seed=seed)
        kname = token_names[k] if token_names is not None else k
        cyc = sum(len(c) > 1 for c in sccs[k])
        ax.set_title(f"G^({kname}): {len(sccs[k])} SCCs, {cyc} cyclic", fontsize=9)
    for ax in axes.ravel()[len(keys):]:
        ax.set_axis_off()
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------
# Max-margin token selection, Fig. 9
# ---------------------------------------------------------------------------
def plot_fig9_bars(dims, not_saturated, lmm, gmm, *, gaps=None):
    """What GD on ``p`` converges to over random trials (max-margin paper Fig. 9).

    (a) For each dimension ``d``: the fraction of trials whose softmax does
    not saturate (red), that converge to an LMM direction (blue) and whose
    LMM direction is the GMM one (green).  (b), when ``gaps`` is given: the
    histogram of the minimal score gap ``min_i min_{t in T_i} gamma_{i alpha_i}
    - gamma_it`` over the saturated trials.

    Parameters
    ----------
    dims : sequence of int
        The dimensions ``d`` (x axis).
    not_saturated, lmm, gmm : sequence of float
        Fractions in [0, 1] per dimension.
    gaps : ndarray or dict of int to ndarray, optional
        Minimal score gaps (all dimensions together, or per dimension).

    Returns
    -------
    matplotlib.figure.Figure
    """
    plt = _pyplot()
    dims = list(dims)
    values = [np.asarray(v, dtype=float) for v in (not_saturated, lmm, gmm)]
    if any(v.shape != (len(dims),) for v in values):
        raise ValueError("not_saturated, lmm and gmm need one fraction per dimension.")
    if any(np.any((v < 0) | (v > 1)) for v in values):
        raise ValueError("fractions must lie in [0, 1].")
    ncols = 1 if gaps is None else 2
    fig, axes = plt.subplots(1, ncols, figsize=(5.5 * ncols, 3.6), squeeze=False)
    ax = axes[0, 0]
    x = np.arange(len(dims))
    width = 0.27
    for off, v, color, label in ((-width, values[0], "tab:red", "not saturated"),
                                 (0.0, values[1], "tab:blue", "p -> LMM p^mm(alpha)"),
                                 (width, values[2], "tab:green", "p^mm(alpha) = GMM")):
        ax.bar(x + off, v, width, color=color, label=label)
    ax.set_xticks(x, [str(d) for d in dims])
    ax.set_xlabel("d")
    ax.set_ylabel("fraction of trials")
    ax.set_ylim(0, 1.22)
    ax.legend(fontsize=7, loc="upper center", ncol=3)
    ax.set_title("(a) convergence of p(t)", fontsize=10)
    if gaps is not None:
        ax = axes[0, 1]
        if isinstance(gaps, dict):
            every = [np.asarray(g, dtype=float) for g in gaps.values()]
            every = np.concatenate(every) if every else np.zeros(0)
            bins = np.histogram_bin_edges(every, bins=50) if every.size else 50
            for d, g in gaps.items():
                g = np.asarray(g, dtype=float)
                if g.size:
                    ax.hist(g, bins=bins, histtype="step", label=f"d = {d}")
            ax.legend(fontsize=7)
        else:
            ax.hist(np.asarray(gaps, dtype=float), bins=50, color="tab:blue")
        ax.axvline(0, color="0.4", ls="--")
        ax.set_xlabel("minimal score gap")
        ax.set_ylabel("trials")
        ax.set_title("(b) score gap to the SVM-neighbors", fontsize=10)
    fig.tight_layout()
    return fig
