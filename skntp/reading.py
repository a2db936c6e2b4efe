"""A trained language model, read through the package: its decoder against the NTP limits.

Thrampoulidis (2024) predicts where a linear decoder trained by gradient descent on
fixed context embeddings goes (Thm. 4.1; for data that are not NTP-separable the
decomposition of :mod:`skntp.svm._ntp_partial`).  A trained language model is such a
decoder on its own last hidden states: ``logits = W h_j (+ b)`` with ``h_j`` the
hidden state that predicts the token after context ``j``.  Holding those states
fixed, the package predicts the decoder's limits from them, and
:func:`decoder_geometry` measures how far the model's own unembedding is from them.
The logit side, against the NTP-UFM's ``L_mm``, is :func:`skntp.metrics.logit_geometry`.

Everything works from arrays, so any framework can feed it;
:func:`torch_decoder_arrays` extracts ``H``, ``W`` and ``b`` from a
:class:`torch.nn.Module` (torch is imported only there).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ._backend import scaled_norm, to_numpy
from .decoder import NTPDecoderClassifier, ntp_cross_entropy
from .metrics import SubspaceProjector, alignment
from .svm import log_odds_problem

__all__ = ["DecoderGeometry", "decoder_geometry", "torch_decoder_arrays"]


@dataclass(frozen=True)
class DecoderGeometry:
    """A trained decoder against the limits predicted from its own hidden states.

    Returned by :func:`decoder_geometry`.  ``W`` below is the model's unembedding
    (with its bias as one more column when it has one), ``W_fin`` and ``W^mm`` the
    limits of :class:`~skntp.NTPDecoderClassifier` fitted on the same hidden states
    (``finite_component_`` and ``mm_direction_`` of :attr:`estimator`), and
    ``P_G(W)`` the part of ``W`` that the logit differences of the contexts see
    (its rows centered, its columns projected on the span of the hidden states):
    the rest changes no softmax on these contexts, and both limits lie in ``G``.

    Attributes
    ----------
    loss : float
        The model's NTP loss (2) on the data: ``CE(W)`` at its hidden states.
    entropy : float
        ``H``, the entropy lower bound of the loss of any model (Sec. 2).
    loss_infimum : float
        The infimum of ``CE`` over decoders on these hidden states, the loss that
        gradient descent on ``W`` alone approaches (``estimator.loss_infimum_``):
        ``entropy`` when the states are NTP-separable and NTP_H-compatible
        (Prop. 3.3), otherwise the loss of the non-separable rows at ``W_fin``;
        ``loss >= loss_infimum >= entropy``.
    alignment : float
        ``cos(P_G(W) - W_fin, W^mm)``, Thm. 4.1's convergence in direction (the
        estimators' ``alignment_``); NaN when no margin row is separable (there is
        no direction: the loss has a minimizer, ``W_fin``).
    alignment_uncorrected : float
        ``cos(P_G(W), W^mm)``, the cosine of the whole decoder (NaN as above).
    finite_distance : float
        ``||P_F(W) - W_fin||_F`` with ``F`` the subspace of the finite part (eq.
        (5); ``F_I`` on data that are not NTP-separable): 0 at the limit.
    finite_norm : float
        ``||W_fin||_F``, the scale of ``finite_distance``.
    mm_coordinate : float
        ``<P_G(W) - W_fin, W^mm / ||W^mm||>``, how far the decoder has gone along
        the direction: the radius ``R`` of ``W ~ W_fin + R W^mm/||W^mm||``, which
        grows like ``log t`` under gradient descent (NaN without a direction).
    norm : float
        ``||W||_F``.
    invisible_fraction : float
        ``||W - P_G(W)||_F / ||W||_F``: the share of the decoder that no logit
        difference of these contexts sees (e.g. a mean row that the random start
        left and gradient descent never moves).
    separable_fraction : float
        The fraction of the margin rows ``(j, v)``, ``v not in S_j``, that some
        direction separates (``estimator.separable_fraction_``; 1.0 on
        NTP-separable states, NaN when unknown).
    is_ntp_separable : bool or None
        Def. 3.2 for the hidden states (``None``: unknown, too large to decide).
    estimator : NTPDecoderClassifier
        The decoder fitted with ``solver="svm"`` on the hidden states (with the
        constant feature when there is a bias): ``mm_direction_``,
        ``finite_component_``, ``separable_rows_``, ``contexts_``,
        ``next_token_probs_``, ...
    """

    loss: float
    entropy: float
    loss_infimum: float
    alignment: float
    alignment_uncorrected: float
    finite_distance: float
    finite_norm: float
    mm_coordinate: float
    norm: float
    invisible_fraction: float
    separable_fraction: float
    is_ntp_separable: bool | None
    estimator: NTPDecoderClassifier

    @property
    def excess_loss(self):
        """``loss - loss_infimum``: what the decoder alone could still gain on these
        hidden states (0 only in the limit)."""
        return self.loss - self.loss_infimum


def _as_matrix(a, name, ndim=2):
    a = np.asarray(to_numpy(a), dtype=float)
    if a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {a.shape}.")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} contains NaN or infinity.")
    return a


def _seen_part(W, contexts):
    """``P_G(W)``: the rows of ``W`` centered (a constant added to every logit of a
    context changes no softmax) and its columns projected on the span of the
    contexts (directions no context has change no logit)."""
    Wc = W - W.mean(axis=0, keepdims=True)
    top = float(np.abs(contexts).max(initial=0.0)) or 1.0
    _, s, vt = np.linalg.svd(contexts / top, full_matrices=False)
    keep = s > (s[0] if s.size else 0.0) * np.finfo(float).eps * max(contexts.shape)
    Q = vt[keep].T  # (d, r): orthonormal basis of the contexts' span
    return Wc if Q.shape[1] == W.shape[1] else (Wc @ Q) @ Q.T


def decoder_geometry(hidden_states, unembedding, y, *, bias=None, sample_weight=None,
                     svm_method="auto", verbose=0):
    """A trained model's decoder against the NTP limits predicted from its hidden states.

    Thrampoulidis (2024): a linear decoder ``W`` trained by gradient descent on
    fixed context embeddings ``h_j`` approaches the infimum of the NTP loss (2),
    ``W_k ~ W* + R_k W^mm / ||W^mm||`` with ``R_k -> infinity``, ``W*`` the
    solution in ``F`` (eq. (5)) of the log-odds equations (3) and ``W^mm`` the
    NTP-SVM (4a)-(4b) (Thm. 4.1).  On embeddings that are not NTP-separable, the
    regime of real models (``d < m``), the same holds with ``W^mm_I``, the NTP-SVM
    of the separable margin rows, and ``W_fin``, the minimizer of the loss of the
    other rows on ``F_I`` (the decomposition of :mod:`skntp.svm._ntp_partial`;
    the user guide's "Data that are not NTP-separable").

    A trained language model is such a decoder on its own last hidden states.
    This fits :class:`~skntp.NTPDecoderClassifier` with ``solver="svm"`` on
    ``(hidden_states, y)`` -- the limits the theory predicts for a decoder trained
    on those states -- and measures the model's ``unembedding`` against them: its
    loss against the decoder's infimum and the entropy, its direction against
    ``W^mm``, its finite part against ``W*`` (or ``W_fin``).

    Parameters
    ----------
    hidden_states : array-like of shape (n, d)
        ``H``: the model's last hidden state for each context, the input of its
        unembedding (after any final normalization), so that the model's logits
        are ``H @ W.T + bias``.  Identical rows are one context, as for
        :meth:`NTPDecoderClassifier.fit`: pass the distinct contexts of a text with
        their next-token distributions, or every position with its next token.
        Torch tensors are accepted (:func:`torch_decoder_arrays` extracts them).
    unembedding : array-like of shape (V, d)
        ``W``: the unembedding (output or ``lm_head`` weight), one row per token;
        row ``v`` scores token ``v``.
    y : array-like of shape (n,) or (n, V)
        The next-token data: next-token ids in ``0..V-1``, or non-negative rows of
        next-token weights (soft labels, e.g. counts or empirical distributions
        ``p_j``), normalized per row as by the decoder.
    bias : array-like of shape (V,), optional
        The unembedding's bias, when it has one.  It is folded in as the weight of
        a constant feature: ``H -> [H, 1]``, ``W -> [W, bias]``.  Gradient descent
        on ``(W, bias)`` with one step size is gradient descent on ``[W, bias]``
        with that feature, so the limits are predicted for it (with one more
        column) and every quantity includes the bias.
    sample_weight : array-like of shape (n,), optional
        The weight of each row (the context weights ``pi_j`` with soft labels;
        default uniform): the decoder's ``sample_weight``.
    svm_method : str, default="auto"
        The method of the max-margin core for the NTP-SVM.
    verbose : int, default=0
        The decoder's progress output.

    Returns
    -------
    DecoderGeometry
        ``loss``, ``entropy``, ``loss_infimum``, ``alignment``,
        ``alignment_uncorrected``, ``finite_distance``, ``finite_norm``,
        ``mm_coordinate``, ``norm``, ``invisible_fraction``,
        ``separable_fraction``, ``is_ntp_separable`` and the fitted ``estimator``
        (:class:`DecoderGeometry`).

    Raises
    ------
    ValueError
        Shapes that disagree (``W`` must have ``d`` columns, ``bias`` ``V``
        entries), NaN or infinity in ``H``, ``W`` or ``bias``, next tokens outside
        ``0..V-1`` or soft labels without ``V`` columns.
    skntp.svm.NotSeparableError
        From the decoder's fit when the limits cannot be determined (a split of
        the margin rows that stays undecided).

    See Also
    --------
    skntp.metrics.logit_geometry : the same model's logits against ``L_mm`` (NTP-UFM).
    torch_decoder_arrays : ``H``, ``W`` and ``bias`` of a torch model.

    Notes
    -----
    The limits are those of gradient descent on ``W`` with ``H`` held fixed, in the
    Frobenius norm.  A language model trains ``H`` too, usually with Adam (whose
    limit is in another norm; ``plot_optimizer_norms``) and weight decay (which
    keeps ``||W||`` finite), for a finite time: how close it comes is what this
    measures, not what the theorem guarantees.  The cost is one fit of the decoder
    at its limit, dominated on data that are not NTP-separable by the separability
    program and the Newton solve of ``W_fin`` (seconds at ``m = 2,000``,
    ``V = 100``, ``d = 32``).

    Examples
    --------
    A decoder trained by the package itself, read back:

    >>> from skntp import NTPDecoderClassifier
    >>> from skntp.datasets import make_ntp_data
    >>> from skntp.reading import decoder_geometry
    >>> X, y = make_ntp_data(n_samples=300, n_contexts=8, n_features=12, n_tokens=6,
    ...                      support_size=3, random_state=0)
    >>> gd = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=2000, vocabulary=6,
    ...                           init="zeros").fit(X, y)
    >>> geo = decoder_geometry(X, gd.coef_, y)
    >>> bool(abs(geo.alignment - gd.alignment_) < 1e-9)
    True
    >>> bool(geo.loss >= geo.loss_infimum == geo.entropy)
    True
    """
    H = _as_matrix(hidden_states, "hidden_states")
    W = _as_matrix(unembedding, "unembedding")
    V, d = W.shape
    if H.shape[1] != d:
        raise ValueError(f"hidden_states have {H.shape[1]} features but the unembedding "
                         f"has {d} columns: the logits are hidden_states @ unembedding.T.")
    if bias is not None:
        b = _as_matrix(bias, "bias", ndim=1)
        if b.shape != (V,):
            raise ValueError(f"bias must have shape (V,) = ({V},), got {b.shape}.")
        H = np.hstack([H, np.ones((H.shape[0], 1))])
        W = np.hstack([W, b[:, None]])
    est = NTPDecoderClassifier(solver="svm", vocabulary=V, svm_method=svm_method,
                               verbose=verbose).fit(H, y, sample_weight=sample_weight)
    contexts = est.contexts_
    probs = sp.csr_matrix(est.next_token_probs_)
    loss = ntp_cross_entropy(W, contexts, est.context_weights_, probs)
    fin, direction = est.finite_component_, est.mm_direction_
    seen = _seen_part(W, contexts)
    norm = scaled_norm(W)
    rest = seen - fin
    # F (or F_I): spanned by (e_a - e_b) h_j^T for a, b in S_j and, off the data that
    # are NTP-separable, the tokens of the rows that are not separable
    rows = est.separable_rows_
    support = (probs.toarray() > 0) if rows is None else ~rows
    projector = SubspaceProjector.from_problem(log_odds_problem(contexts, support.astype(float)))
    return DecoderGeometry(
        loss=loss, entropy=float(est.entropy_), loss_infimum=float(est.loss_infimum_),
        alignment=float("nan") if direction is None else alignment(rest, direction),
        alignment_uncorrected=(float("nan") if direction is None
                               else alignment(seen, direction)),
        finite_distance=scaled_norm(projector.project(W) - fin),
        finite_norm=scaled_norm(fin),
        mm_coordinate=(float("nan") if direction is None
                       else float(np.sum(rest * direction))),
        norm=norm,
        invisible_fraction=scaled_norm(W - seen) / norm if norm > 0 else 0.0,
        separable_fraction=float(est.separable_fraction_),
        is_ntp_separable=est.is_ntp_separable_, estimator=est)


def _attribute(model, name):
    obj = model
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def torch_decoder_arrays(model, inputs, *, unembedding="lm_head", hidden_states=None,
                         batch_size=1024):
    """``H``, ``W`` and the bias of a torch language model, for :func:`decoder_geometry`.

    The interface asked of the model is the one of a decoder-only language model: an
    unembedding that is a linear map of the last hidden states (``logits = h W^T + b``,
    a :class:`torch.nn.Linear` such as GPT-2's or nanoGPT's ``lm_head``, or a tied
    weight), and either a forward pass through it or a callable that returns the
    hidden states.  Nothing of the model's code is copied; torch is imported here only.

    Parameters
    ----------
    model : torch.nn.Module
        The model.  It runs in evaluation mode (no dropout) under
        :func:`torch.no_grad`; its training mode is restored afterwards.
    inputs : torch.Tensor or array-like of shape (m, T)
        One row per context (token ids, left-padded so that the last position is
        the context's last token; or whatever ``model`` accepts), cut into batches
        along the first axis.
    unembedding : str, torch.nn.Linear or torch.Tensor, default="lm_head"
        The unembedding: the (dotted) name of an attribute of ``model``, a
        ``torch.nn.Linear(d, V)`` (its ``weight`` (V, d) and ``bias``), or a tensor
        of shape (V, d) (a tied embedding, no bias).
    hidden_states : None, str or callable, default=None
        How to get ``H``: ``None`` runs ``model(batch)`` and records the input of
        the unembedding module (a forward hook: the hidden states exactly as the
        model's logits use them); a str names a method of ``model``; a callable is
        called as ``hidden_states(batch)``.  Either returns ``(batch, d)``, or
        ``(batch, T, d)`` whose last position is taken (the one that predicts the
        next token).
    batch_size : int, default=1024
        Rows of ``inputs`` per forward pass.

    Returns
    -------
    H : ndarray of shape (m, d)
        The last hidden states, float64.
    W : ndarray of shape (V, d)
        The unembedding, float64.
    bias : ndarray of shape (V,) or None
        Its bias (``None`` without one).

    Raises
    ------
    TypeError
        ``unembedding`` neither a linear module nor a (V, d) tensor, or
        ``hidden_states=None`` with an unembedding that is not a module (nothing
        to hook).
    ValueError
        Hidden states whose width is not ``d``, or one row per context missing.

    Examples
    --------
    >>> import torch  # doctest: +SKIP
    >>> H, W, b = torch_decoder_arrays(gpt, context_ids)  # doctest: +SKIP
    >>> geo = decoder_geometry(H, W, next_token_probs, bias=b,
    ...                        sample_weight=context_weights)  # doctest: +SKIP
    """
    import torch

    unemb = _attribute(model, unembedding) if isinstance(unembedding, str) else unembedding
    if isinstance(unemb, torch.nn.Module):
        weight, b = getattr(unemb, "weight", None), getattr(unemb, "bias", None)
    else:
        weight, b = unemb, None
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        raise TypeError("unembedding must be a torch.nn.Linear(d, V), the name of one, or a "
                        f"(V, d) tensor; got {type(unemb).__name__}.")
    if hidden_states is None and not isinstance(unemb, torch.nn.Module):
        raise TypeError("hidden_states=None records the input of the unembedding module; "
                        "with a tensor unembedding (tied weights) pass hidden_states, a "
                        "method name or a callable that returns the last hidden states.")
    if isinstance(hidden_states, str):
        hidden_states = getattr(model, hidden_states)
    inputs = inputs if isinstance(inputs, torch.Tensor) else torch.as_tensor(np.asarray(inputs))
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size!r}.")
    captured = []

    def last(h):
        h = h[0] if isinstance(h, tuple) else h
        return (h[:, -1] if h.ndim == 3 else h).detach().to("cpu", torch.float64)

    hook = None
    if hidden_states is None:
        hook = unemb.register_forward_hook(lambda mod, args, out: captured.append(last(args)))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, inputs.shape[0], int(batch_size)):
                batch = inputs[start:start + int(batch_size)]
                if hook is None:
                    captured.append(last(hidden_states(batch)))
                else:
                    model(batch)
    finally:
        model.train(was_training)
        if hook is not None:
            hook.remove()
    H = torch.cat(captured).numpy() if captured else np.zeros((0, weight.shape[1]))
    W = weight.detach().to("cpu", torch.float64).numpy()
    if H.shape != (inputs.shape[0], W.shape[1]):
        raise ValueError(f"the hidden states have shape {H.shape}, not (m, d) = "
                         f"({inputs.shape[0]}, {W.shape[1]}): one row per context, the "
                         "input of the unembedding.")
    bias = None if b is None else b.detach().to("cpu", torch.float64).numpy()
    return H, W, bias
