"""Plots of fitted skntp estimators and their histories (needs matplotlib).

matplotlib is an optional dependency (``pip install 'skntp[plot]'``); it is
imported inside each function, so ``import skntp`` never imports it.

Every function takes ``ax=`` (one Axes, or one per panel for the
multi-panel plots) so that it can draw into a grid of your own, and
returns what it drew on: an Axes, or an array of Axes (one per panel).
Without ``ax`` a new figure is made (``axes[0].figure``).  The
:class:`~matplotlib.figure.Figure`-level plots are also available as
Display objects in scikit-learn's style (``XxxDisplay.from_estimator(...)``
computes and draws; ``display.plot(ax=...)`` draws again elsewhere), which
keep the drawn artists (``axes_``, ``figure_``, ``lines_``).

* :func:`plot_training_curves` / :class:`TrainingCurvesDisplay` -- NTP
  paper Fig. 1 (right) and Fig. 4/5: loss against the entropy bound, norm,
  alignment (raw and corrected), finite-component distance, against the
  iteration.  Fits with ``solver="svm"`` (the limits themselves) are drawn
  as horizontal reference lines.
* :func:`plot_metric_over_trials` -- self-attention paper Fig. 3/4: one
  history entry (e.g. the correlation with ``W^mm``) averaged over random
  instances, with the band of the trials.
* :func:`plot_word_embeddings` / :class:`WordEmbeddingDisplay` -- NTP paper
  Fig. 1 (left) and Fig. 2: the next-token matrix ``P``
  (:func:`plot_next_token_matrix`) and the rows of ``W^mm`` and ``W*`` as
  word embeddings (:func:`plot_decoder_rows`).
* :func:`plot_attention_trajectories` / :class:`AttentionTrajectoryDisplay`
  -- max-margin paper Fig. 1/3/8: the trajectory of the attention query
  ``p`` in 2-D with the GMM/LMM (or ``p^relax``) directions and the tokens'
  keys.
* :func:`plot_token_priority_graphs` / :class:`TokenPriorityGraphDisplay`
  -- self-attention paper Fig. 2: the token-priority graphs with their
  strongly connected components.
* :func:`plot_fig9_bars` -- max-margin paper Fig. 9: what GD converges to
  over random trials, per dimension.
"""

from __future__ import annotations

import numpy as np

from .graphs import draw_token_priority_graph, strongly_connected_components

__all__ = [
    "AttentionTrajectoryDisplay",
    "TokenPriorityGraphDisplay",
    "TrainingCurvesDisplay",
    "WordEmbeddingDisplay",
    "plot_attention_trajectories",
    "plot_decoder_rows",
    "plot_fig9_bars",
    "plot_metric_over_trials",
    "plot_next_token_matrix",
    "plot_optimizer_norms",
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


def _panel_axes(ax, n, *, panel_size=(3.6, 3.2), ncols=None):
    """``n`` Axes: the user's (one Axes when ``n == 1``, else a sequence of ``n``)
    or those of a new figure (one row, or ``ncols`` columns)."""
    if n < 1:
        raise ValueError("there is no panel to draw (an empty list of keys or panels).")
    if ax is None:
        plt = _pyplot()
        ncols = n if ncols is None else min(ncols, n)
        nrows = -(-n // ncols)
        fig, axes = plt.subplots(nrows, ncols, squeeze=False,
                                 figsize=(panel_size[0] * ncols, panel_size[1] * nrows))
        flat = axes.ravel()
        for extra in flat[n:]:
            extra.set_axis_off()
        return flat[:n], fig, True
    flat = np.ravel(np.asarray(ax, dtype=object))
    if flat.size != n:
        raise ValueError(f"this plot has {n} panel(s); got ax with {flat.size} Axes.")
    return flat, flat[0].figure, False


def _history(obj):
    """``obj.history_`` for a fitted estimator, ``obj`` for a dict."""
    hist = obj if isinstance(obj, dict) else getattr(obj, "history_", None)
    if hist is None:
        raise ValueError(
            f"{type(obj).__name__} has no history_: pass a fitted estimator or its "
            "history_ dict."
        )
    return hist


def _recorded_history(obj):
    """:func:`_history`, which must hold at least one record."""
    hist = _history(obj)
    if "iteration" not in hist or len(hist["iteration"]) == 0:
        raise ValueError("a history has no record (no 'iteration' entries): nothing to plot.")
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
# NTP paper, Fig. 1 (right) and Fig. 4/5
# ---------------------------------------------------------------------------
_CURVE_PANELS = {
    "loss": "loss",
    "norm": "norm of the parameter",
    "alignment": "correlation with the max-margin direction",
    "finite_distance": "distance to the finite component",
}


class TrainingCurvesDisplay:
    """Training curves of fitted estimators against the iteration.

    Four panels (NTP paper Fig. 1 right and Fig. 4/5): (a) the loss and the
    entropy lower bound ``H`` (the loss converges to ``H``, Thm. 4.1); (b)
    the parameter norm (diverges); (c) the corrected alignment
    ``cos(W - W*, W^mm)`` (solid) and the uncorrected ``cos(W, W^mm)``
    (dashed), both converging to 1; (d) the finite-component distance ``||P_F(W) - W*||``
    (converges to 0).  Panels whose key no history has are left out, so
    attention histories (loss, norm, alignment) are drawn too.

    A *limit* -- a fit with ``solver="svm"``, or any history of a single
    record -- has no trajectory: it is drawn as a horizontal reference line
    (long dashes; dotted for its uncorrected alignment) in the loss and
    alignment panels, and in the distance panel when positive.  Its norm is the
    chosen radius ``svm_radius_``, not a limit of GD, so it is not drawn.

    Use :meth:`from_estimator` to create one; the constructor only stores.

    Parameters
    ----------
    histories : list of dict
        ``history_`` dicts (``iteration`` and ``loss`` at least; batched
        per-trial histories are averaged over trials).
    labels : list of str or None
    entropy : float, optional
        The entropy bound ``H`` drawn in the loss panel.
    limits : list of bool, optional
        Which runs are limits (default: the histories with one record).

    Attributes
    ----------
    axes_ : ndarray of matplotlib Axes
        One per panel.
    figure_ : matplotlib Figure
    lines_ : dict of str to list of Line2D
        The lines of every run, by label.
    """

    def __init__(self, histories, labels, *, entropy=None, limits=None):
        self.histories = list(histories)
        self.labels = list(labels)
        self.entropy = entropy
        self.limits = ([len(np.atleast_1d(h["iteration"])) == 1 for h in self.histories]
                       if limits is None else list(limits))

    @classmethod
    def from_estimator(cls, estimators_or_histories, labels=None, *, entropy=None,
                       keys=None, log_x=True, ax=None):
        """Compute and draw the curves of fitted estimators (or their histories).

        Parameters
        ----------
        estimators_or_histories : estimator, dict, or list of them
        labels : list of str, optional
            One legend label per run (default: each estimator's ``solver``,
            ``"run i"`` for dicts).
        entropy : float, optional
            The entropy bound ``H``; read from the first estimator with an
            ``entropy_`` when omitted.
        keys : sequence of str, optional
            Panels among ``"loss"``, ``"norm"``, ``"alignment"``,
            ``"finite_distance"`` (default: every one some history has).
        log_x : bool, default=True
            Logarithmic iteration axis (``iteration + 1``), as in the paper.
        ax : matplotlib Axes or sequence of Axes, optional
            One Axes per panel.

        Returns
        -------
        TrainingCurvesDisplay
        """
        runs = _as_list(estimators_or_histories)
        if not runs:
            raise ValueError("nothing to plot: pass at least one estimator or history.")
        hists = [_recorded_history(r) for r in runs]
        if labels is None:
            names = [getattr(r, "solver", None) for r in runs]
            if len(runs) == 1:
                labels = [names[0]]
            else:
                labels = [n if n is not None and names.count(n) == 1 else
                          (f"{n} {i}" if n is not None else f"run {i}")
                          for i, n in enumerate(names)]
        else:
            labels = _labels(labels, len(hists))
        if entropy is None:
            entropy = next((getattr(r, "entropy_", None) for r in runs
                            if getattr(r, "entropy_", None) is not None), None)
        limits = [getattr(r, "solver", None) == "svm"
                  or len(np.atleast_1d(h["iteration"])) == 1 for r, h in zip(runs, hists)]
        disp = cls(hists, labels, entropy=entropy, limits=limits)
        return disp.plot(keys=keys, log_x=log_x, ax=ax)

    def _keys(self, keys):
        present = [k for k in _CURVE_PANELS if k == "loss" or any(
            k in h
            for h in self.histories)]
        if keys is None:
            return present
        keys = list(keys)
        unknown = [k for k in keys if k not in _CURVE_PANELS]
        if unknown:
            raise ValueError(f"unknown panel(s) {unknown}; choose from {list(_CURVE_PANELS)}.")
        return keys

    def plot(self, *, keys=None, log_x=True, ax=None):
        """Draw the curves.

        Parameters
        ----------
        keys : sequence of str, optional
            See :meth:`from_estimator`.
        log_x : bool, default=True
        ax : matplotlib Axes or sequence of Axes, optional

        Returns
        -------
        self
        """
        plt = _pyplot()
        keys = self._keys(keys)
        axes, fig, new = _panel_axes(ax, len(keys))
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        self.lines_ = {}
        for i, (hist, label, limit) in enumerate(zip(self.histories, self.labels,
                                                     self.limits)):
            c = colors[i % len(colors)]
            drawn = self.lines_.setdefault(label, [])
            it = np.asarray(hist["iteration"], dtype=float)
            x = it + 1 if log_x else it
            for a, key in zip(axes, keys):
                series = [(key, "-")]
                if key == "alignment":  # with a finite part, also the uncorrected cosine
                    series = [("alignment", "-"), ("alignment_uncorrected", "--")]
                for name, ls in series:
                    if name not in hist:
                        continue
                    y = _trial_mean(hist[name])
                    if not limit:
                        drawn += a.plot(x, y, color=c, ls=ls,
                                        label=label if ls == "-" else None)
                        continue
                    value = float(y[-1])
                    if key == "norm" or not np.isfinite(value) or (
                            key == "finite_distance" and value <= 0):
                        continue
                    name_ = "limit" if label is None else f"{label} (limit)"
                    drawn.append(a.axhline(value, color=c, ls=(0, (4, 2)) if ls == "-"
                                           else ":", lw=1.2,
                                           label=name_ if ls == "-" else None))
        for a, key in zip(axes, keys):
            a.set_title(_CURVE_PANELS[key], fontsize=10)
            a.set_xlabel("iteration + 1" if log_x else "iteration")
            if log_x:
                a.set_xscale("log")
            a.grid(alpha=0.3)
            if key == "loss" and self.entropy is not None:
                a.axhline(self.entropy, color="k", ls=":", lw=1.0,
                          label=f"entropy H = {self.entropy:.3f}")
            if key == "alignment":
                a.set_ylim(min(-0.05, a.get_ylim()[0]), 1.05)
            if key == "finite_distance":
                a.set_yscale("log")
            handles, names = a.get_legend_handles_labels()
            if key == "alignment" and any("alignment_uncorrected" in h for h in self.histories):
                handles += [plt.Line2D([], [], color="gray"),
                            plt.Line2D([], [], color="gray", ls="--")]
                names += ["cos(W - W*, W^mm)", "cos(W, W^mm)"]
            if handles and (key in ("loss", "alignment") or len(keys) == 1):
                # below the panel, where no curve is (inside, wherever the curves
                # go they cross it); 9 pt, readable at the figure's size
                a.legend(handles, names, fontsize=9, loc="upper center",
                         bbox_to_anchor=(0.5, 0.0), borderaxespad=3.4, ncol=2,
                         frameon=False)
        if new:
            fig.tight_layout()
        self.axes_, self.figure_ = np.asarray(axes, dtype=object), fig
        return self


def plot_training_curves(estimators_or_histories, labels=None, *, entropy=None, keys=None,
                         log_x=True, ax=None):
    """Training curves in the style of the NTP paper's Fig. 1 (right) and Fig. 4/5.

    See :class:`TrainingCurvesDisplay`: the loss against the entropy bound,
    the norm, the alignment with the max-margin direction (raw and
    corrected) and the distance to the finite component, against the
    iteration.  Fits with ``solver="svm"`` are drawn as horizontal
    reference lines (the values GD converges to).

    Parameters
    ----------
    estimators_or_histories : estimator, dict, or list of them
    labels : list of str, optional
    entropy : float, optional
    keys : sequence of str, optional
        The panels (default: all the histories have).
    log_x : bool, default=True
    ax : matplotlib Axes or sequence of Axes, optional
        One Axes per panel.

    Returns
    -------
    ndarray of matplotlib Axes
        One per panel.
    """
    return TrainingCurvesDisplay.from_estimator(
        estimators_or_histories, labels, entropy=entropy, keys=keys, log_x=log_x, ax=ax
    ).axes_


# ---------------------------------------------------------------------------
# Self-attention paper, Fig. 3/4: averages over random instances
# ---------------------------------------------------------------------------
def plot_metric_over_trials(estimators_or_histories, key="alignment", *, band=(0.0, 1.0),
                            label=None, color=None, log_x=False, log_y=None, ax=None):
    """One history entry averaged over trials, with the band of the trials.

    The self-attention paper's Fig. 3 and 4 average, over 100 random
    datasets, the correlation ``<W, W^mm>/(||W|| ||W^mm||)``
    (``key="alignment"``) and the distance ``||Pi_Scyc(W) - W^cyc||``
    (``key="finite_distance"``) against the iteration.  Trials must be
    recorded at the same iterations; a trial that stopped early (its
    gradient vanished) keeps its last value.

    Parameters
    ----------
    estimators_or_histories : list of estimators or history dicts
        One per trial (``history_[key]`` and ``history_["iteration"]``).
    key : str, default="alignment"
    band : (float, float) or None, default=(0.0, 1.0)
        Quantiles of the trials shaded around the mean (``(0, 1)``: min to
        max; ``(0.25, 0.75)``: interquartile); ``None`` draws no band.
    label : str, optional
        Legend label of the mean (default: ``"mean of n trials"``).
    color : color, optional
    log_x : bool, default=False
        Logarithmic iteration axis (``iteration + 1``).
    log_y : bool, optional
        Logarithmic y axis (default: for ``"finite_distance"``).
    ax : matplotlib Axes, optional

    Returns
    -------
    matplotlib Axes
    """
    runs = _as_list(estimators_or_histories)
    if not runs:
        raise ValueError("nothing to plot: pass at least one estimator or history.")
    hists = [_recorded_history(r) for r in runs]
    missing = [i for i, h in enumerate(hists) if key not in h]
    if missing:
        raise ValueError(f"trial(s) {missing[:5]} have no {key!r} in their history.")
    longest = max(hists, key=lambda h: len(h["iteration"]))
    it = np.asarray(longest["iteration"], dtype=float)
    values = np.full((len(hists), it.size), np.nan)
    for i, h in enumerate(hists):
        v = _trial_mean(h[key])
        values[i, : v.size] = v
        values[i, v.size:] = v[-1]
    (a,), fig, _ = _panel_axes(ax, 1, panel_size=(4.5, 3.4))
    x = it + 1 if log_x else it
    mean = values.mean(axis=0)
    line, = a.plot(x, mean, color=color, lw=1.6,
                   label=label if label is not None else f"mean of {len(hists)} trials")
    if band is not None and len(hists) > 1:
        lo, hi = np.quantile(values, band, axis=0)
        q = ("min-max" if tuple(band) == (0.0, 1.0)
             else f"{band[0]:.0%}-{band[1]:.0%} quantiles")
        a.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, lw=0,
                       label=f"{q} of the trials")
    if log_x:
        a.set_xscale("log")
    if log_y if log_y is not None else key == "finite_distance":
        a.set_yscale("log")
    a.set_xlabel("iteration + 1" if log_x else "iteration")
    a.set_ylabel(key)
    a.grid(alpha=0.3)
    a.legend(fontsize=7)
    return a


# ---------------------------------------------------------------------------
# NTP paper, Fig. 1 (left) and Fig. 2
# ---------------------------------------------------------------------------
def _plane(rows):
    """A 2-D orthonormal basis: the identity for d = 2, else the top-2 PCs of the rows."""
    if rows.shape[1] == 2:
        return np.eye(2)
    _, _, vt = np.linalg.svd(rows - rows.mean(axis=0), full_matrices=False)
    return vt[:2].T


def _context_order(contexts, context_embeddings):
    """Indices into ``contexts`` of the rows of ``context_embeddings`` (then the rest),
    and the rows of ``context_embeddings`` that are first occurrences."""
    E = np.asarray(context_embeddings, dtype=float)
    if E.ndim != 2 or E.shape[1] != contexts.shape[1]:
        raise ValueError(
            f"context_embeddings must have shape (k, {contexts.shape[1]}), got {E.shape}."
        )
    order, first = [], []
    for i, row in enumerate(E):
        dist = np.linalg.norm(contexts - row, axis=1)
        j = int(np.argmin(dist))
        if dist[j] > 1e-9 * max(1.0, float(np.linalg.norm(row))):
            raise ValueError(f"row {i} of context_embeddings is not a context of the fit.")
        if j not in order:
            order.append(j)
            first.append(i)
    return order + [j for j in range(contexts.shape[0]) if j not in order], first


class WordEmbeddingDisplay:
    """A fitted decoder's rows as word embeddings (NTP paper Fig. 1 left, Fig. 2).

    Three panels: ``"probs"``, the next-token matrix ``P`` of the distinct
    contexts (rows) and words (columns), off-support entries black;
    ``"mm"``, the rows ``w_z`` of ``W^mm`` (``mm_direction_``), which depend
    only on the support sets (words that follow the same contexts share
    their row), with the contexts ``h_j`` (black dots, rescaled to the rows'
    extent) and their support sets; ``"finite"``, the rows of ``W*``
    (``finite_component_``), which encode the in-support log-odds.  For
    ``d > 2`` rows are normalized (their directions are compared) and
    projected on the top two principal directions of the shown rows.

    Use :meth:`from_estimator` to create one.

    Attributes
    ----------
    axes_ : ndarray of matplotlib Axes
    figure_ : matplotlib Figure
    """

    PANELS = ("probs", "mm", "finite")

    def __init__(self, next_token_probs, mm_rows, finite_rows, contexts, context_weights,
                 words, context_names):
        self.next_token_probs = np.asarray(next_token_probs, dtype=float)
        self.mm_rows = np.asarray(mm_rows, dtype=float)
        self.finite_rows = np.asarray(finite_rows, dtype=float)
        self.contexts = np.asarray(contexts, dtype=float)
        self.context_weights = np.asarray(context_weights, dtype=float)
        self.words = list(words)
        self.context_names = list(context_names)

    @classmethod
    def from_estimator(cls, fitted_decoder, words=None, contexts=None, *,
                       context_embeddings=None, panels=PANELS, max_words=30,
                       max_contexts=12, ax=None):
        """Draw a fitted :class:`~skntp.NTPDecoderClassifier`'s limits.

        Parameters
        ----------
        fitted_decoder : NTPDecoderClassifier
            Fitted with ``compute_limits=True`` on NTP-separable data.
        words : list of str, optional
            Names of the words (default: ``classes_``).
        contexts : list of str, optional
            Names of the distinct contexts: aligned with ``context_embeddings``
            when given, else with ``contexts_`` (default: A, B, C, ... in
            that order).
        context_embeddings : array-like of shape (k, d), optional
            Contexts of the fit (e.g. the distinct rows of your ``X`` in your
            order): the rows of ``P`` follow this order, the other contexts
            come after.  ``contexts_`` itself is sorted lexicographically.
        panels : sequence of {"probs", "mm", "finite"}, default=all three
        max_words : int, default=30
            Draw at most that many words in the embedding panels (the most
            frequent next tokens).
        max_contexts : int, default=12
            Draw the contexts (and their support sets) only when there are at
            most that many.
        ax : matplotlib Axes or sequence of Axes, optional
            One per panel.

        Returns
        -------
        WordEmbeddingDisplay
        """
        for attr in ("mm_direction_", "finite_component_", "next_token_probs_",
                     "contexts_"):
            if getattr(fitted_decoder, attr, None) is None:
                raise ValueError(
                    f"the decoder has no {attr}: fit it with compute_limits=True on "
                    "NTP-separable data."
                )
        P = fitted_decoder.next_token_probs_
        P = P.toarray() if hasattr(P, "toarray") else np.asarray(P)
        H = np.asarray(fitted_decoder.contexts_, dtype=float)
        m = H.shape[0]
        def default_names(k):
            return [chr(65 + j) for j in range(k)] if m <= 26 else [str(j) for j in range(k)]

        if context_embeddings is None:
            order = list(range(m))
            names = default_names(m) if contexts is None else [str(c) for c in contexts]
            if len(names) != m:
                raise ValueError(f"contexts needs one name per context: {m}, got {len(names)}.")
        else:
            order, first = _context_order(H, context_embeddings)
            k = len(np.asarray(context_embeddings))
            if contexts is None:
                names = default_names(m)
            else:
                names = [str(c) for c in contexts]
                if len(names) != k:
                    raise ValueError(f"contexts needs one name per row of "
                                     f"context_embeddings: {k}, got {len(names)}.")
                names = [names[i] for i in first] + [f"#{j}" for j in order[len(first):]]
        words = ([str(c) for c in fitted_decoder.classes_] if words is None
                 else [str(w) for w in words])
        if len(words) != len(fitted_decoder.classes_):
            raise ValueError(f"words needs one name per token of classes_: "
                             f"{len(fitted_decoder.classes_)}, got {len(words)}.")
        disp = cls(P[order], fitted_decoder.mm_direction_, fitted_decoder.finite_component_,
                   H[order], np.asarray(fitted_decoder.context_weights_)[order], words,
                   names)
        return disp.plot(panels=panels, max_words=max_words, max_contexts=max_contexts,
                         ax=ax)

    def plot(self, *, panels=PANELS, max_words=30, max_contexts=12, ax=None):
        """Draw the panels (see :meth:`from_estimator`); returns ``self``."""
        panels = list(panels)
        unknown = [p for p in panels if p not in self.PANELS]
        if unknown:
            raise ValueError(f"unknown panel(s) {unknown}; choose from {self.PANELS}.")
        axes, fig, new = _panel_axes(ax, len(panels), panel_size=(4.4, 4.2))
        for a, panel in zip(axes, panels):
            if panel == "probs":
                self._draw_probs(a)
            else:
                self._draw_rows(a, panel, max_words, max_contexts)
        if new:
            fig.tight_layout()
        self.axes_, self.figure_ = np.asarray(axes, dtype=object), fig
        return self

    def _draw_probs(self, ax):
        plt = _pyplot()
        P = self.next_token_probs
        m, V = P.shape
        masked = np.ma.masked_where(P <= 0, P)
        cmap = plt.get_cmap("viridis").with_extremes(bad="black")
        im = ax.imshow(masked, cmap=cmap, aspect="auto", vmin=0, interpolation="nearest")
        ax.figure.colorbar(im, ax=ax, fraction=0.046, label="probability (black: 0)")
        ax.set_title("P: next-token probabilities", fontsize=10)
        ax.set_xlabel("next word")
        ax.set_ylabel("context")
        if V <= 40:
            ax.set_xticks(range(V), self.words, fontsize=8 if V <= 20 else 6,
                          rotation=90 if max(map(len, self.words)) > 2 else 0)
        if m <= 40:
            ax.set_yticks(range(m), self.context_names, fontsize=8 if m <= 20 else 6)

    def _draw_rows(self, ax, panel, max_words, max_contexts):
        plt = _pyplot()
        P, H = self.next_token_probs, self.contexts
        m, V = P.shape
        shown = np.argsort(-(self.context_weights @ P), kind="stable")[:max_words]
        color_of = {z: rank for rank, z in enumerate(sorted(shown))}
        colors = plt.get_cmap("tab10" if V <= 10 else "tab20")
        W = self.mm_rows if panel == "mm" else self.finite_rows
        title = "rows of W^mm (direction)" if panel == "mm" else "rows of W* (finite component)"
        if W.shape[1] > 2:  # compare directions (cosines) of the rows
            nrm = np.linalg.norm(W, axis=1, keepdims=True)
            W = W / np.where(nrm > 0, nrm, 1.0)
        basis = _plane(W[shown])
        w2, h2 = W @ basis, H @ basis
        scale = max(np.abs(w2[shown]).max(), 1e-12) / max(np.abs(h2).max(), 1e-12)
        draw_contexts = m <= max_contexts
        hs = h2 * scale if draw_contexts else np.zeros((0, 2))
        ax.scatter(hs[:, 0], hs[:, 1], c="k", s=25, zorder=3, marker="o")
        if draw_contexts:
            for j in range(m):
                ax.annotate(self.context_names[j], hs[j], textcoords="offset points",
                            xytext=(4, 4), fontsize=8, fontweight="bold")
                if panel == "mm":  # the support set S_j below the context (Fig. 1)
                    support = [self.words[z] for z in np.flatnonzero(P[j] > 0)]
                    ax.annotate("S = {" + ",".join(support) + "}", hs[j],
                                textcoords="offset points", xytext=(0, -12), fontsize=7,
                                color="0.35", ha="center")
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
            ax.scatter(*w2[z], marker="*", color=col, s=70, zorder=4)
            ax.annotate(",".join(self.words[g] for g in sorted(group)), w2[z],
                        textcoords="offset points", xytext=(4, -10), fontsize=8, color=col)
        lim = 1.2 * max(np.abs(w2[shown]).max(), np.abs(hs).max(initial=0.0), 1e-12)
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.axhline(0, color="0.85", lw=0.8, zorder=0)
        ax.axvline(0, color="0.85", lw=0.8, zorder=0)
        plane = "" if W.shape[1] == 2 else "\n(unit rows, top-2 PCs)"
        ax.set_title(title + plane, fontsize=10)
        handles = [plt.Line2D([], [], ls="", marker="*", color="0.3", markersize=9,
                              label="word row w_z")]
        if draw_contexts:
            handles.insert(0, plt.Line2D([], [], ls="", marker="o", color="k", markersize=5,
                                         label="context h_j (rescaled)"))
        ax.legend(handles=handles, fontsize=7, loc="lower left")


def plot_word_embeddings(fitted_decoder, words=None, contexts=None, *,
                         context_embeddings=None, max_words=30, max_contexts=12, ax=None):
    """Decoder rows as word embeddings, the NTP paper's Fig. 1 (left) and Fig. 2.

    Three panels (see :class:`WordEmbeddingDisplay`): the next-token matrix
    ``P``, the rows of ``W^mm`` (with the contexts and their support sets)
    and the rows of ``W*``.

    Parameters
    ----------
    fitted_decoder : NTPDecoderClassifier
        Fitted with ``compute_limits=True`` on NTP-separable data.
    words : list of str, optional
    contexts : list of str, optional
        Context names (see :meth:`WordEmbeddingDisplay.from_estimator`).
    context_embeddings : array-like of shape (k, d), optional
        The contexts in the order to show them.
    max_words : int, default=30
    max_contexts : int, default=12
    ax : sequence of 3 matplotlib Axes, optional

    Returns
    -------
    ndarray of 3 matplotlib Axes
    """
    return WordEmbeddingDisplay.from_estimator(
        fitted_decoder, words, contexts, context_embeddings=context_embeddings,
        max_words=max_words, max_contexts=max_contexts, ax=ax).axes_


def plot_next_token_matrix(fitted_decoder, words=None, contexts=None, *,
                           context_embeddings=None, ax=None):
    """The next-token matrix ``P`` of a fitted decoder (NTP paper Fig. 2, left).

    Parameters are those of :func:`plot_word_embeddings`.

    Returns
    -------
    matplotlib Axes
    """
    return WordEmbeddingDisplay.from_estimator(
        fitted_decoder, words, contexts, context_embeddings=context_embeddings,
        panels=("probs",), ax=ax).axes_[0]


def plot_decoder_rows(fitted_decoder, which="mm", words=None, contexts=None, *,
                      context_embeddings=None, max_words=30, max_contexts=12, ax=None):
    """Rows of ``W^mm`` (``which="mm"``) or ``W*`` (``"finite"``) as word embeddings.

    NTP paper Fig. 1 (left: ``W^mm`` with the contexts and their support
    sets) and Fig. 2 (middle, right).  Parameters are those of
    :func:`plot_word_embeddings`.

    Returns
    -------
    matplotlib Axes
    """
    if which not in ("mm", "finite"):
        raise ValueError(f"which must be 'mm' or 'finite', got {which!r}.")
    return WordEmbeddingDisplay.from_estimator(
        fitted_decoder, words, contexts, context_embeddings=context_embeddings,
        panels=(which,), max_words=max_words, max_contexts=max_contexts, ax=ax).axes_[0]


# ---------------------------------------------------------------------------
# Max-margin token selection, Fig. 1/3/8
# ---------------------------------------------------------------------------
_MARKERS = "osD^vP*Xh"


def _trajectory(obj, key):
    hist = None
    if hasattr(obj, "trajectory_"):
        hist = obj.trajectory_
    elif not isinstance(obj, np.ndarray):
        hist = _history(obj)
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


class AttentionTrajectoryDisplay:
    """Trajectories of the attention query ``p`` in 2-D (max-margin paper Fig. 1/3/8).

    Each run's iterates ``p(t)``, normalized (the paper draws directions,
    with an arrow at the end), the max-margin directions as rays and the
    tokens' keys ``k_it = W x_it`` colored by their score
    ``gamma_it = Y_i v^T x_it``, one marker shape per input (in the legend).
    Use :meth:`from_estimator` to create one.

    Attributes
    ----------
    ax_ : matplotlib Axes
    figure_ : matplotlib Figure
    """

    def __init__(self, trajectories, labels, directions, keys=None, token_scores=None,
                 dims=(0, 1), key="query"):
        self.trajectories = [np.asarray(t, dtype=float) for t in trajectories]
        self.labels = list(labels)
        self.directions = dict(directions)
        self.keys = None if keys is None else np.asarray(keys, dtype=float)
        self.token_scores = None if token_scores is None else np.asarray(token_scores,
                                                                         dtype=float)
        self.dims = list(dims)
        self.key = key

    @classmethod
    def from_estimator(cls, estimators_or_trajectories, X=None, *, key="query",
                       directions=None, dims=(0, 1), labels=None, token_scores=None,
                       title=None, ax=None):
        """Draw fitted attention estimators' trajectories.

        Parameters
        ----------
        estimators_or_trajectories : estimator, dict, ndarray or list of them
            Fitted ``AttentionSelector`` / ``JointAttentionSVM`` (their
            ``trajectory_[key]``), trajectory dicts, or (n_iter, d) arrays.
        X : ndarray of shape (n, T, d), optional
            The inputs, drawn as key positions (``key_query_`` of the first
            estimator applied when it has one, else the identity).
        key : str, default="query"
            The trajectory entry holding the iterates (``"head"`` for ``v``).
        directions : dict of str to ndarray, optional
            Rays to draw, e.g. ``{"GMM": p_mm_star, "LMM": p_mm}``.  By
            default the first estimator's ``gmm_direction_`` and
            ``mm_direction_`` (``p^relax`` for the joint model) when they
            exist.
        dims : tuple of two int, default=(0, 1)
        labels : list of str, optional
        token_scores : ndarray of shape (n, T), optional
            Scores for the token colors (default: the first estimator's
            ``token_scores_``).
        title : str, optional
        ax : matplotlib Axes, optional

        Returns
        -------
        AttentionTrajectoryDisplay
        """
        runs = _as_list(estimators_or_trajectories)
        if not runs:
            raise ValueError("nothing to plot: pass at least one estimator or trajectory.")
        trajs = [_trajectory(r, key) for r in runs]
        labels = _labels(labels, len(trajs), prefix="init")
        first = runs[0]
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
        keys = None
        if X is not None:
            X = np.asarray(X, dtype=float)
            if X.ndim == 2:
                X = X[None]
            Wk = getattr(first, "key_query_", None)
            keys = X if Wk is None else X @ np.asarray(Wk, dtype=float).T
        disp = cls(trajs, labels, directions, keys, token_scores, dims, key)
        return disp.plot(title=title, ax=ax)

    def plot(self, *, title=None, ax=None):
        """Draw (see :meth:`from_estimator`); returns ``self``."""
        plt = _pyplot()
        (ax,), fig, _ = _panel_axes(ax, 1, panel_size=(5.2, 5.0))
        dims = self.dims
        handles = []
        if self.keys is not None:
            K = self.keys
            k2 = K[..., dims].reshape(-1, 2)
            scores = self.token_scores
            vmax = None if scores is None else max(np.abs(scores[np.isfinite(scores)]).max(),
                                                   1e-12)
            sc = None
            for i in range(K.shape[0]):
                pts = K[i][:, dims]
                marker = _MARKERS[i % len(_MARKERS)]
                kw = ({"c": np.where(np.isfinite(scores[i]), scores[i], 0.0),
                       "cmap": "coolwarm", "vmin": -vmax, "vmax": vmax}
                      if scores is not None else {"c": "0.4"})
                sc = ax.scatter(pts[:, 0], pts[:, 1], marker=marker, s=60, edgecolors="k",
                                zorder=3, **kw)
                if K.shape[0] <= len(_MARKERS):
                    handles.append(plt.Line2D([], [], ls="", marker=marker, color="0.7",
                                              markeredgecolor="k", label=f"tokens of input {i}"))
            if scores is not None and sc is not None:
                fig.colorbar(sc, ax=ax, fraction=0.046, label="token score gamma")
            span = max(1.0, np.abs(k2).max())
        else:
            span = 1.0
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for i, (traj, label) in enumerate(zip(self.trajectories, self.labels)):
            t2 = traj[:, dims]
            nrm = np.linalg.norm(traj, axis=1, keepdims=True)
            u = span * t2 / np.where(nrm > 0, nrm, 1.0)
            c = colors[i % len(colors)]
            ax.plot(u[:, 0], u[:, 1], color=c, lw=1.5, label=label)
            ax.annotate("", xy=u[-1], xytext=u[max(0, len(u) - 2)],
                        arrowprops={"arrowstyle": "-|>", "color": c})
            ax.scatter(*u[0], color=c, marker="o", s=20, zorder=4)
        styles = ["-", "--", ":", "-."]
        for j, (name, direction) in enumerate(self.directions.items()):
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
        ax.set_title(title or f"trajectories of {self.key} / ||{self.key}||", fontsize=10)
        lines, names = ax.get_legend_handles_labels()
        ax.legend(lines + handles, names + [h.get_label() for h in handles], fontsize=7,
                  loc="lower left")
        self.ax_, self.figure_ = ax, fig
        return self


def plot_attention_trajectories(estimators_or_trajectories, X=None, *, key="query",
                                directions=None, dims=(0, 1), labels=None,
                                token_scores=None, ax=None, title=None):
    """Trajectories of the attention query ``p`` in 2-D (max-margin paper Fig. 1/3/8).

    See :class:`AttentionTrajectoryDisplay` for the parameters: the
    normalized iterates of every run, the max-margin directions as rays and
    the tokens' keys colored by score, one marker shape per input.

    Returns
    -------
    matplotlib Axes
    """
    return AttentionTrajectoryDisplay.from_estimator(
        estimators_or_trajectories, X, key=key, directions=directions, dims=dims,
        labels=labels, token_scores=token_scores, title=title, ax=ax).ax_


# ---------------------------------------------------------------------------
# Self-attention for NTP, Fig. 2
# ---------------------------------------------------------------------------
class TokenPriorityGraphDisplay:
    """Token-priority graphs with their SCCs (self-attention paper Fig. 2).

    One panel per last token ``k``: the graph ``G^(k)`` with edges
    ``label -> token``; nodes colored by strongly connected component
    (singletons grey), edges inside an SCC dashed red (``i ~ j``), edges
    between components solid (``i => j``), explained in a legend.  Use
    :meth:`from_estimator` to create one.

    Attributes
    ----------
    axes_ : ndarray of matplotlib Axes
    figure_ : matplotlib Figure
    """

    def __init__(self, graphs, sccs, token_names=None):
        self.graphs = graphs
        self.sccs = sccs
        self.token_names = token_names

    @classmethod
    def from_estimator(cls, estimator_or_graphs, sccs=None, *, max_graphs=8,
                       token_names=None, seed=0, ax=None):
        """Draw a fitted :class:`~skntp.NTPAttentionClassifier`'s graphs (or a dict).

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
            Node labels (e.g. the words of a :class:`~skntp.datasets.TokenEncoder`).
        seed : int, default=0
            Seed of the layout.
        ax : matplotlib Axes or sequence of Axes, optional
            One per drawn graph.

        Returns
        -------
        TokenPriorityGraphDisplay
        """
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
        disp = cls({k: graphs[k] for k in keys}, {k: sccs[k] for k in keys}, token_names)
        return disp.plot(seed=seed, ax=ax)

    def plot(self, *, seed=0, ax=None):
        """Draw (see :meth:`from_estimator`); returns ``self``."""
        plt = _pyplot()

        keys = sorted(self.graphs)
        axes, fig, new = _panel_axes(ax, len(keys), panel_size=(3.2, 3.2), ncols=4)
        names = self.token_names
        for a, k in zip(axes, keys):
            labels = None if names is None else {v: names[v] for v in self.graphs[k].nodes}
            draw_token_priority_graph(self.graphs[k], self.sccs[k], ax=a, labels=labels,
                                      seed=seed)
            kname = names[k] if names is not None else k
            cyc = sum(len(c) > 1 for c in self.sccs[k])
            a.set_title(f"G^({kname}): {len(self.sccs[k])} SCCs, {cyc} cyclic", fontsize=9)
        handles = [
            plt.Line2D([], [], color="k", label="i => j (across SCCs)"),
            plt.Line2D([], [], color="tab:red", ls="--", label="i ~ j (same SCC)"),
            plt.Line2D([], [], ls="", marker="o", color=(0.75, 0.75, 0.75),
                       label="singleton SCC"),
            plt.Line2D([], [], ls="", marker="o", color=plt.get_cmap("tab10")(0),
                       label="cyclic SCC (one color each)"),
        ]
        axes[0].legend(handles=handles, fontsize=6, loc="upper left",
                       bbox_to_anchor=(0.0, 0.0), ncol=2, frameon=False)
        if new:
            fig.tight_layout()
        self.axes_, self.figure_ = np.asarray(axes, dtype=object), fig
        return self


def plot_token_priority_graphs(estimator_or_graphs, sccs=None, *, max_graphs=8,
                               token_names=None, seed=0, ax=None):
    """Token-priority graphs with their SCCs (self-attention paper Fig. 2).

    See :class:`TokenPriorityGraphDisplay` for the parameters.

    Returns
    -------
    ndarray of matplotlib Axes
        One per drawn graph.
    """
    return TokenPriorityGraphDisplay.from_estimator(
        estimator_or_graphs, sccs, max_graphs=max_graphs, token_names=token_names,
        seed=seed, ax=ax).axes_


# ---------------------------------------------------------------------------
# Max-margin token selection, Fig. 9
# ---------------------------------------------------------------------------
def plot_fig9_bars(dims, not_saturated, lmm, gmm, *, gaps=None, ax=None):
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
    ax : matplotlib Axes, or sequence of 2 Axes when ``gaps`` is given, optional

    Returns
    -------
    ndarray of matplotlib Axes
        One per panel.
    """
    dims = list(dims)
    values = [np.asarray(v, dtype=float) for v in (not_saturated, lmm, gmm)]
    if any(v.shape != (len(dims),) for v in values):
        raise ValueError("not_saturated, lmm and gmm need one fraction per dimension.")
    if not dims:
        raise ValueError("dims is empty: there is no dimension to draw.")
    if any(not np.all((v >= 0) & (v <= 1)) for v in values):  # NaN fails too
        raise ValueError("fractions must lie in [0, 1] (and not be NaN).")
    axes, fig, new = _panel_axes(ax, 1 if gaps is None else 2, panel_size=(5.5, 3.6))
    a = axes[0]
    x = np.arange(len(dims))
    width = 0.27
    for off, v, color, label in ((-width, values[0], "tab:red", "not saturated"),
                                 (0.0, values[1], "tab:blue", "p -> LMM p^mm(alpha)"),
                                 (width, values[2], "tab:green", "p^mm(alpha) = GMM")):
        a.bar(x + off, v, width, color=color, label=label)
    a.set_xticks(x, [str(d) for d in dims])
    a.set_xlabel("d")
    a.set_ylabel("fraction of trials")
    a.set_ylim(0, 1.22)
    a.legend(fontsize=7, loc="upper center", ncol=3)
    a.set_title("(a) convergence of p(t)", fontsize=10)
    if gaps is not None:
        a = axes[1]
        if isinstance(gaps, dict):
            every = [np.asarray(g, dtype=float) for g in gaps.values()]
            every = np.concatenate(every) if every else np.zeros(0)
            bins = np.histogram_bin_edges(every, bins=50) if every.size else 50
            for d, g in gaps.items():
                g = np.asarray(g, dtype=float)
                if g.size:
                    a.hist(g, bins=bins, histtype="step", label=f"d = {d}")
            a.legend(fontsize=7)
        else:
            a.hist(np.asarray(gaps, dtype=float), bins=50, color="tab:blue")
        a.axvline(0, color="0.4", ls="--")
        a.set_xlabel("minimal score gap")
        a.set_ylabel("trials")
        a.set_title("(b) score gap to the SVM-neighbors", fontsize=10)
    if new:
        fig.tight_layout()
    return np.asarray(axes, dtype=object)


def plot_optimizer_norms(comparison, *, ax=None):
    """The optimizer x norm matrix of :func:`skntp.diagnostics.compare_optimizers`.

    Two panels: the cosine of ``W - W*`` with each norm's max-margin solution,
    and the normalized margin in each norm as a fraction of its optimum (1
    at that norm's limit).  One row per optimizer, one column per norm.

    Parameters
    ----------
    comparison : dict
        The output of :func:`~skntp.diagnostics.compare_optimizers`.
    ax : sequence of 2 matplotlib Axes, optional

    Returns
    -------
    ndarray of matplotlib Axes
    """
    solvers, norms = list(comparison["solvers"]), list(comparison["norms"])
    panels = (("alignment", "cosine of W - W* with W^mm"),
              ("margin_fraction", "normalized margin / optimum"))
    axes, fig, new = _panel_axes(ax, 2, panel_size=(4.2, 3.4))
    for a, (key, title) in zip(axes, panels):
        values = np.asarray(comparison[key], dtype=float)
        if values.shape != (len(solvers), len(norms)) or values.size == 0:
            raise ValueError(f"{key} must have shape ({len(solvers)}, {len(norms)}), with "
                             "at least one optimizer and one norm.")
        if not np.all(np.isfinite(values)):
            raise ValueError(f"{key} holds NaN or infinity: nothing to compare there.")
        image = a.imshow(values, vmin=min(0.0, float(np.nanmin(values))), vmax=1.0,
                         cmap="viridis")
        for (i, j), v in np.ndenumerate(values):
            a.text(j, i, f"{v:.2f}", ha="center", va="center",
                   color="white" if v < 0.6 else "black", fontsize=9)
        a.set_xticks(range(len(norms)), [n if isinstance(n, str) else f"l{n[1]:g}"
                                         for n in norms], rotation=30, ha="right")
        a.set_yticks(range(len(solvers)), solvers)
        a.set_xlabel("norm of the limit")
        a.set_title(title, fontsize=10)
        a.figure.colorbar(image, ax=a, shrink=0.8)
    if new:
        fig.tight_layout()
    return np.asarray(axes, dtype=object)
