"""Token-priority graphs of next-token data (Li et al., "Mechanics of NTP with self-attention").

For a dataset of token-id sequences ``X_i`` with next tokens ``y_i``, the
token-priority graph ``G^(k)`` (Sec. 3.1) collects, for every sample whose
*last* token is ``k``, the edges ``y_i -> x`` for every token ``x`` of ``X_i``.
Its strongly connected components (SCCs) split the pairs of tokens into

* ``i => j``: the edge ``i -> j`` is present and ``j`` cannot reach ``i``
  (``i`` has strictly higher priority: attention learns to suppress ``j``);
* ``i ~ j`` (written ``i \\asymp j`` in the paper): ``i`` and ``j`` are in the
  same SCC (attention keeps both, in a ratio set by the cyclic correction).

The dataset is *acyclic* (Def. 2) when every SCC is a singleton.  The
*cyclic sub-dataset* (Def. 1) drops from every sequence the tokens ``x`` with
``y => x``; it defines the cyclic correction ``W^cyc`` (Def. 3) on the
subspace ``S_cyc``.  The SCCs come from :func:`networkx.strongly_connected_components`.

Sequences are token ids: a 2-D integer array ``(n, T)`` or a list of 1-D
integer sequences of different lengths.  Floats are accepted only when they
are exactly integral (a rounding-free cast); anything else is an error.
"""

from __future__ import annotations

import networkx as nx
import numpy as np

__all__ = [
    "PaddedSequences",
    "check_token_labels",
    "check_token_sequences",
    "cyclic_subdataset",
    "cyclic_subspace_basis",
    "draw_token_priority_graph",
    "graph_relations",
    "is_acyclic",
    "label_scc_positions",
    "pseudo_token_priority_graphs",
    "strongly_connected_components",
    "token_priority_graphs",
]


# --------------------------------------------------------------------------
# Validation of token-id sequences
# --------------------------------------------------------------------------
#: Largest token id accepted (ids index arrays of the vocabulary's size).
_MAX_ID = np.iinfo(np.int64).max


def _as_int(arr, name):
    arr = np.asarray(arr)
    if arr.dtype == bool:
        return arr.astype(np.int64)
    if arr.dtype.kind in "iu":
        if arr.dtype.kind == "u" and arr.size and arr.max() > _MAX_ID:
            raise ValueError(f"{name} holds the token id {int(arr.max())}, beyond any "
                             "vocabulary (ids must be below 2**63).")
        return arr.astype(np.int64)
    if arr.dtype.kind == "f":
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"Input {name} contains NaN or infinity.")
        if arr.size and np.abs(arr).max() >= 2.0**63:
            big = arr.ravel()[np.argmax(np.abs(arr.ravel()))]
            raise ValueError(f"{name} holds the token id {big!r}, beyond any vocabulary "
                             "(ids must be integers below 2**63).")
        if np.any(arr != np.round(arr)):
            bad = arr[arr != np.round(arr)].ravel()[0]
            raise ValueError(
                f"{name} must hold integer token ids; got the non-integer value {bad!r}. "
                "Float input is accepted only when every value is integral (no rounding "
                "is done)."
            )
        return arr.astype(np.int64)
    if arr.dtype.kind == "c":
        raise ValueError(f"Complex data not supported: {name} must hold integer token ids.")
    if arr.dtype.kind == "O":
        try:
            as_float = arr.astype(np.float64)
        except TypeError as exc:
            raise TypeError(
                f"{name} must hold integer token ids; the float() argument must be a "
                f"string or a real number: {exc}"
            ) from exc
        except ValueError as exc:
            raise ValueError(f"{name} must hold integer token ids: {exc}") from exc
        return _as_int(as_float, name)
    raise ValueError(f"{name} must hold integer token ids, got dtype {arr.dtype}.")


def check_token_sequences(X, n_tokens=None, *, name="X"):
    """Validate token-id sequences and return them padded.

    Parameters
    ----------
    X : array-like of shape (n, T) or list of 1-D sequences
        Token ids; sequences may have different lengths (list input).
    n_tokens : int, optional
        Vocabulary size ``K``: every id must lie in ``[0, K)``.
    name : str, default="X"
        Name used in error messages.

    Returns
    -------
    ids : ndarray of shape (n, T_max), int64
        Token ids, padded with 0 after the end of each sequence.
    mask : ndarray of shape (n, T_max), bool
        True at real tokens.
    last : ndarray of shape (n,), int64
        The last token ``x_bar`` of every sequence (the query of eq. (1)).

    Raises
    ------
    ValueError
        On empty input or empty sequences, non-integer or non-finite values,
        ids out of range, or input that is not 2-D / a list of sequences.
    """
    if hasattr(X, "toarray"):
        raise TypeError(f"{name}: sparse input is not supported; pass token ids.")
    if not isinstance(X, (np.ndarray, list, tuple)) and hasattr(X, "__array__"):
        X = np.asarray(X)  # array-likes such as pandas frames
    if isinstance(X, np.ndarray) and (X.dtype != object or X.ndim == 2):
        if X.ndim != 2:
            raise ValueError(
                f"{name} must be a 2-D array (n_samples, seq_len) of token ids or a list "
                f"of 1-D token-id sequences; got an array of shape {X.shape}. "
                "Reshape your data: X.reshape(1, -1) for a single sequence."
            )
        if X.shape[1] == 0:
            raise ValueError(
                f"Found array with 0 feature(s) (shape={X.shape}) while a minimum of 1 is "
                f"required: {name} holds empty sequences."
            )
        ids = _as_int(X, name)
        mask = np.ones(ids.shape, dtype=bool)
    else:
        try:
            seqs = [np.asarray(s) for s in X]
        except TypeError as exc:
            raise ValueError(
                f"{name} must be a 2-D array of token ids or a list of sequences."
            ) from exc
        for i, s in enumerate(seqs):
            if s.ndim != 1:
                raise ValueError(
                    f"{name}[{i}] must be a 1-D sequence of token ids, got shape {s.shape}."
                )
        n = len(seqs)
        T = max((s.shape[0] for s in seqs), default=0)
        ids = np.zeros((n, T), dtype=np.int64)
        mask = np.zeros((n, T), dtype=bool)
        for i, s in enumerate(seqs):
            if s.shape[0]:
                ids[i, : s.shape[0]] = _as_int(s, f"{name}[{i}]")
                mask[i, : s.shape[0]] = True
    n, T = ids.shape
    if n == 0:
        raise ValueError(f"{name} is empty: found 0 sequences (n_samples=0).")
    if T == 0 or not mask.any(axis=1).all():
        empty = np.flatnonzero(~mask.any(axis=1))
        raise ValueError(
            f"{name} contains an empty sequence (sample {int(empty[0]) if empty.size else 0})"
            "; every sequence needs at least one token (its last token is the query)."
        )
    if np.any(ids[mask] < 0):
        raise ValueError(
            f"Negative values in data passed to {name}: token ids must be non-negative; "
            f"found {ids[mask].min()}."
        )
    if n_tokens is not None and np.any(ids[mask] >= n_tokens):
        raise ValueError(
            f"{name}: token ids out of range: found id {int(ids[mask].max())} but the "
            f"vocabulary has {n_tokens} tokens (ids 0..{n_tokens - 1})."
        )
    lengths = mask.sum(axis=1)
    last = ids[np.arange(n), lengths - 1]
    return ids, mask, last


def check_token_labels(y, n_samples, n_tokens=None, *, name="y"):
    """Validate next-token ids ``y`` (shape ``(n,)``) and return them as int64."""
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y.ravel()
    if y.ndim != 1:
        raise ValueError(f"{name} must be 1-D next-token ids, got shape {y.shape}.")
    if y.shape[0] != n_samples:
        raise ValueError(f"X has {n_samples} sequences but {name} has {y.shape[0]} labels.")
    if y.dtype.kind == "f" and np.any(np.isfinite(y) & (y != np.round(y))):
        raise ValueError(
            f"Unknown label type: continuous. {name} must hold integer next-token ids."
        )
    if y.dtype.kind in "OUS":
        try:
            y = y.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"Unknown label type: {name} must hold integer next-token ids, got "
                f"dtype {y.dtype}."
            ) from exc
    y = _as_int(y, name)
    if np.any(y < 0):
        raise ValueError(f"{name}: token ids must be non-negative; found {y.min()}.")
    if n_tokens is not None and np.any(y >= n_tokens):
        raise ValueError(
            f"{name}: token ids out of range: found id {int(y.max())} but the vocabulary "
            f"has {n_tokens} tokens (ids 0..{n_tokens - 1})."
        )
    return y


class PaddedSequences(tuple):
    """Already validated sequences ``(ids, mask, last)`` from :func:`check_token_sequences`.

    Functions of this module accept it in place of ``X`` to skip re-validation.
    """

    __slots__ = ()

    def __new__(cls, ids, mask, last):
        return super().__new__(cls, (ids, mask, last))


def _padded(X, y, n_tokens=None):
    if isinstance(X, PaddedSequences):
        ids, mask, last = X
    else:
        ids, mask, last = check_token_sequences(X, n_tokens)
    y = check_token_labels(y, ids.shape[0], n_tokens)
    return ids, mask, last, y


# --------------------------------------------------------------------------
# Graphs
# --------------------------------------------------------------------------
def _graphs_from_edges(last, src, dst, nodes_by_query):
    graphs = {}
    for k in sorted(nodes_by_query):
        g = nx.DiGraph()
        g.add_nodes_from(sorted(nodes_by_query[int(k)]))
        sel = last == k
        g.add_edges_from(zip(src[sel].tolist(), dst[sel].tolist()))
        graphs[int(k)] = g
    return graphs


def _edge_table(ids, mask, last, heads, head_mask):
    """Edges ``(k, h, x)`` from every head token ``h`` to every token ``x`` (no loops)."""
    n, T = ids.shape
    H = heads.shape[1]
    k = np.broadcast_to(last[:, None, None], (n, H, T))
    h = np.broadcast_to(heads[:, :, None], (n, H, T))
    x = np.broadcast_to(ids[:, None, :], (n, H, T))
    ok = head_mask[:, :, None] & mask[:, None, :] & (h != x)
    table = np.unique(np.stack([k[ok], h[ok], x[ok]], axis=1), axis=0)
    nodes = {}
    for kk in np.unique(last):
        sel = last == kk
        toks = set(ids[sel][mask[sel]].tolist()) | set(heads[sel][head_mask[sel]].tolist())
        nodes[int(kk)] = toks
    return table.reshape(-1, 3), nodes


def token_priority_graphs(X, y, *, n_tokens=None):
    """The token-priority graphs ``G^(k)`` of a dataset (Sec. 3.1).

    For every sample ``(X_i, y_i)`` whose last token is ``k``, ``G^(k)`` gets
    the edges ``y_i -> x`` for every token ``x != y_i`` of ``X_i`` (the label
    and all tokens of the sequence are nodes).

    Parameters
    ----------
    X : array-like of shape (n, T) or list of 1-D sequences
        Token ids.
    y : array-like of shape (n,)
        Next-token ids.
    n_tokens : int, optional
        Vocabulary size (validates the ids).

    Returns
    -------
    graphs : dict of int to networkx.DiGraph
        One graph per last token that occurs, edges ``label -> token``.
    """
    ids, mask, last, y = _padded(X, y, n_tokens)
    table, nodes = _edge_table(ids, mask, last, y[:, None], np.ones((len(y), 1), bool))
    return _graphs_from_edges(table[:, 0], table[:, 1], table[:, 2], nodes)


def pseudo_token_priority_graphs(X, selected, *, n_tokens=None):
    """Pseudo token-priority graphs from the tokens attention selects (Sec. 6).

    For every sequence with last token ``k``, ``G^(k)`` gets the edges
    ``x_{t1} -> x_{t2}`` for every *selected* position ``t1`` (softmax
    probability above a threshold, see
    :meth:`skntp.NTPAttentionClassifier.pseudo_graphs`) and every position ``t2``.

    Parameters
    ----------
    X : array-like of shape (n, T) or list of 1-D sequences
    selected : ndarray of shape (n, T_max), bool
        Selected positions (padded like :func:`check_token_sequences`).

    Returns
    -------
    graphs : dict of int to networkx.DiGraph
    """
    ids, mask, last = (X if isinstance(X, PaddedSequences)
                       else check_token_sequences(X, n_tokens))
    selected = np.asarray(selected, dtype=bool) & mask
    if not selected.any(axis=1).all():
        raise ValueError("every sequence needs at least one selected token.")
    table, nodes = _edge_table(ids, mask, last, ids, selected)
    return _graphs_from_edges(table[:, 0], table[:, 1], table[:, 2], nodes)


def strongly_connected_components(graphs):
    """SCCs of every graph (networkx), each a list of sets sorted by smallest node.

    Parameters
    ----------
    graphs : dict of int to networkx.DiGraph

    Returns
    -------
    sccs : dict of int to list of set
    """
    return {
        k: sorted((set(c) for c in nx.strongly_connected_components(g)), key=min)
        for k, g in graphs.items()
    }


def is_acyclic(graphs, sccs=None):
    """True when every SCC of every graph is a singleton (Def. 2)."""
    sccs = strongly_connected_components(graphs) if sccs is None else sccs
    return all(len(c) == 1 for comps in sccs.values() for c in comps)


def _component_index(sccs, n_tokens):
    """``comp[k][token]`` = index of the token's SCC in ``G^(k)`` (-1 if absent)."""
    comp = {}
    for k, comps in sccs.items():
        arr = np.full(n_tokens, -1, dtype=np.int64)
        for c_idx, c in enumerate(comps):
            arr[list(c)] = c_idx
        comp[k] = arr
    return comp


def label_scc_positions(sccs, ids, mask, last, y, n_tokens):
    """The positions of every sequence holding a token of its label's SCC in ``G^(last)``.

    (The sets ``R_i`` of App. A: the tokens the limit keeps attending to.)
    """
    comp = _component_index(sccs, n_tokens)
    inside = np.zeros_like(mask)
    for k, arr in comp.items():
        sel = last == k
        inside[sel] = mask[sel] & (arr[ids[sel]] == arr[y[sel]][:, None])
    return inside


def graph_relations(graphs, sccs=None):
    """The priority relations of every graph (Sec. 3.1).

    Parameters
    ----------
    graphs : dict of int to networkx.DiGraph
    sccs : dict of int to list of set, optional

    Returns
    -------
    strict : ndarray of shape (n_strict, 3), int
        Rows ``(k, i, j)`` with ``(i => j)`` in ``G^(k)``: the edge ``i -> j``
        crosses SCCs (so ``j`` cannot reach ``i``).
    tied : ndarray of shape (n_tied, 3), int
        Rows ``(k, j, a)`` with ``j ~ a``, ``a`` the smallest node of ``j``'s
        non-singleton SCC and ``j != a``: a spanning set of the ``i ~ j``
        relations (all pairs of an SCC follow by transitivity).
    """
    sccs = strongly_connected_components(graphs) if sccs is None else sccs
    strict, tied = [], []
    for k, g in graphs.items():
        where = {}
        for c_idx, c in enumerate(sccs[k]):
            anchor = min(c)
            for node in c:
                where[node] = c_idx
                if node != anchor:
                    tied.append((k, node, anchor))
        strict.extend((k, i, j) for i, j in g.edges if where[i] != where[j])
    as_arr = lambda rows: np.asarray(sorted(rows), dtype=np.int64).reshape(-1, 3)  # noqa: E731
    return as_arr(strict), as_arr(tied)


# --------------------------------------------------------------------------
# Cyclic sub-dataset and S_cyc
# --------------------------------------------------------------------------
def cyclic_subdataset(X, y, sccs, *, n_tokens=None, keep=None):
    """The cyclic sub-dataset (Def. 1; App. A, eq. (5)).

    Drops from every sequence the tokens ``x`` with ``(y => x)``, keeping the
    tokens in the label's SCC of ``G^(k)`` (``k`` the last token, which stays
    the query even when it is dropped).  Samples left with a single distinct
    token (the label alone) have a constant loss and are dropped too, as in
    App. A (the index set ``I``).

    Parameters
    ----------
    X : array-like of shape (n, T) or list of 1-D sequences
    y : array-like of shape (n,)
    sccs : dict of int to list of set
        SCCs of the graphs of ``(X, y)`` (or of pseudo graphs).
    keep : ndarray of shape (n, T_max), bool, optional
        Positions that act as "labels" (for pseudo graphs: the selected
        tokens); defaults to the positions of ``y``'s SCC.

    Returns
    -------
    ids : ndarray of shape (m, T_max), int
    mask : ndarray of shape (m, T_max), bool
        The kept tokens (not left-aligned; positions do not matter).
    query : ndarray of shape (m,), int
        Last token ``k`` of the original sequences.
    labels : ndarray of shape (m,), int
    index : ndarray of shape (m,), int
        Indices of the kept samples in ``X`` (the set ``I``).
    """
    ids, mask, last, y = _padded(X, y, n_tokens)
    if ids.shape[0] == 0:
        e = np.zeros(0, dtype=np.int64)
        return ids, mask, e, e, e
    K = int(max(ids[mask].max(), y.max())) + 1
    for comps in sccs.values():
        for c in comps:
            K = max(K, max(c) + 1)
    comp = _component_index(sccs, K)
    n = ids.shape[0]
    tok_comp = np.full(ids.shape, -2, dtype=np.int64)
    ref = np.full(n, -3, dtype=np.int64)
    for k, arr in comp.items():
        sel = last == k
        tok_comp[sel] = np.where(mask[sel], arr[ids[sel]], -2)
        if keep is None:
            ref[sel] = arr[y[sel]]
    if keep is not None:
        keep = np.asarray(keep, dtype=bool) & mask
        # the component of the selected tokens (they point to each other: one SCC)
        first = np.argmax(keep, axis=1)
        ref = tok_comp[np.arange(n), first]
    kept = mask & (tok_comp == ref[:, None]) & (ref[:, None] >= 0)
    big = np.where(kept, ids, -1)
    lo = np.where(kept, ids, np.iinfo(np.int64).max).min(axis=1)
    distinct = (big.max(axis=1) > lo) & kept.any(axis=1)
    index = np.flatnonzero(distinct)
    return ids[index], kept[index], last[index], y[index], index


def cyclic_subspace_basis(embeddings, sccs):
    """Spanning rows of ``S_cyc`` (Def. 3), one per token of a non-singleton SCC.

    Row ``(k, j)`` is ``vec((e_j - e_bar^(k)_i) e_k^T)`` (C order) with
    ``e_bar`` the mean embedding of ``j``'s SCC ``C_i^(k)``.

    Parameters
    ----------
    embeddings : ndarray of shape (K, d)
    sccs : dict of int to list of set

    Returns
    -------
    rows : ndarray of shape (n_rows, d * d)
        (``n_rows = 0`` for an acyclic dataset: ``S_cyc = {0}``.)
    """
    E = np.asarray(embeddings, dtype=float)
    d = E.shape[1]
    rows = []
    for k, comps in sccs.items():
        for c in comps:
            if len(c) < 2:
                continue
            members = sorted(c)
            diff = E[members] - E[members].mean(axis=0)
            rows.append(np.einsum("ja,c->jac", diff, E[k]).reshape(len(members), d * d))
    return np.concatenate(rows) if rows else np.zeros((0, d * d))


# --------------------------------------------------------------------------
# Drawing (Fig. 2)
# --------------------------------------------------------------------------
def draw_token_priority_graph(graph, sccs=None, *, ax=None, labels=None, seed=0):
    """Draw one token-priority graph with its SCCs (the paper's Fig. 2).

    Nodes are colored by SCC (singletons grey), edges ``i => j`` are solid and
    edges inside an SCC dashed.

    Parameters
    ----------
    graph : networkx.DiGraph
    sccs : list of set, optional
        The graph's SCCs (computed when omitted).
    ax : matplotlib Axes, optional
    labels : dict, optional
        Node labels (default: the token ids).
    seed : int, default=0
        Seed of the spring layout.

    Returns
    -------
    ax : matplotlib Axes

    Raises
    ------
    ImportError
        If matplotlib is not installed.
    """
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("draw_token_priority_graph needs matplotlib.") from exc

    if sccs is None:
        sccs = strongly_connected_components({0: graph})[0]
    if ax is None:
        _, ax = plt.subplots(figsize=(4, 4))
    where = {node: i for i, c in enumerate(sccs) for node in c}
    cmap = plt.get_cmap("tab10")
    colors = [
        cmap(where[v] % 10) if len(sccs[where[v]]) > 1 else (0.75, 0.75, 0.75, 1.0)
        for v in graph.nodes
    ]
    pos = nx.spring_layout(graph, seed=seed)
    cross = [(i, j) for i, j in graph.edges if where[i] != where[j]]
    inner = [(i, j) for i, j in graph.edges if where[i] == where[j]]
    nx.draw_networkx_nodes(graph, pos, ax=ax, node_color=colors)
    nx.draw_networkx_labels(graph, pos, ax=ax, labels=labels)
    nx.draw_networkx_edges(graph, pos, edgelist=cross, ax=ax, arrows=True)
    nx.draw_networkx_edges(graph, pos, edgelist=inner, ax=ax, arrows=True, style="dashed",
                           edge_color="tab:red")
    ax.set_axis_off()
    return ax
