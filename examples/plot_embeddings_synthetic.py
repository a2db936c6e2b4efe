"""
Trained embeddings on synthetic sparse data: logits, Grams and norms (NTP-UFM)
==============================================================================

Zhao, Behnia, Vakilian, Thrampoulidis, *Implicit Geometry of Next-token
Prediction* (2024), the synthetic experiments.  With free word embeddings ``W``
and one free embedding per distinct context (the unconstrained-features model,
NTP-UFM), the logits ``L = W H`` of the cross-entropy split into a finite
in-support part ``L_in`` and a part growing along ``L_mm``, the
minimum-nuclear-norm logits with margin 1 between every context's in-support
and out-of-support tokens (the logit-space NTP-SVM).

**The paper's claims.** (i) The loss approaches its entropy bound while the
norms of ``W`` and ``H`` grow; (ii) the in-support logits converge to ``L_in``
(the data's log-ratios); (iii) the logits, the word Gram ``W W^T`` and the
context Gram ``H^T H`` align with ``L_mm`` and the Grams of its balanced factors
``W_mm = U S^{1/2}``, ``H_mm = V S^{1/2}`` (``L_mm = U S V^T``), so the
similarities of trained embeddings follow the support pattern; (iv) along the
regularization path (weight decay ``lambda``) the alignment becomes exact as
``lambda -> 0``.

The set-up of the authors' synthetic data: ``m = 16`` contexts, each with
``|S_j| = 3`` next tokens over ``V = 30`` tokens, every token in some support and
a few frequent tokens shared by several contexts; each in-support token is
seen once or twice.  The UFM has ``d = 128`` and is trained full batch by Adam
(the authors use AdamW with lr 1e-4 and weight decay 1e-6 for 30000 epochs;
here lr 1e-3 and no weight decay).
"""

# %%
# The data
# --------
# One row of ``X`` per occurrence, holding its context's index (the UFM uses
# only the identity of a context).
import warnings

import matplotlib.pyplot as plt
import numpy as np

from skntp import NTPEmbeddingClassifier
from skntp.metrics import logit_geometry

rng = np.random.default_rng(0)
m, V, s, n_frequent = 16, 30, 3, 10
supports = [[] for _ in range(m)]
for token, slot in enumerate(rng.permutation(m * s)[:V]):  # every token in one support
    supports[slot // s].append(token)
frequent = rng.choice(V, n_frequent, replace=False)
for S in supports:  # the other slots: frequent tokens, shared by several contexts
    while len(S) < s:
        S.append(int(rng.choice(np.setdiff1d(frequent, S))))
counts = rng.integers(1, 3, size=(m, s))  # each in-support token seen once or twice
X = np.repeat(np.arange(m, dtype=float), counts.sum(axis=1))[:, None]
y = np.concatenate([np.repeat(S, c) for S, c in zip(supports, counts)])
print(f"m = {m} contexts, V = {len(np.unique(y))} tokens, |S_j| = {s}, n = {len(y)} samples")

# %%
# Training by Adam, and the regularization path
# ---------------------------------------------
# ``solver="adam"`` without weight decay follows the authors' optimizer;
# ``solver="gd"`` with weight decay ``lambda`` (lr 1) runs close to the
# minimizer of the decayed loss, one point of the path per ``lambda``.
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ufm = NTPEmbeddingClassifier("adam", lr=1e-3, n_components=128, max_iter=30000,
                                 record_every=150, random_state=0).fit(X, y)
    lambdas = (1e-2, 1e-3, 1e-4)
    path = [NTPEmbeddingClassifier("gd", lr=1.0, weight_decay=lam, n_components=128,
                                   max_iter=30000, record_every=30000,
                                   random_state=0).fit(X, y) for lam in lambdas]
P = ufm.next_token_probs_
support = P > 0
L, L_mm, L_in = ufm.coef_, ufm.svm_result_.primal, ufm.finite_component_
W, H = ufm.word_embeddings_, ufm.context_embeddings_
geo = logit_geometry(support, word_embeddings=W, context_embeddings=H, L_mm=L_mm,
                     finite_component=L_in)

# the in-support logits, centered per context (the projection onto the finite
# subspace), against L_in
centered = np.where(support.T, L - np.where(support.T, L, 0.0).sum(0) / support.sum(1), 0.0)
finite_gap = np.linalg.norm(centered - L_in) / np.linalg.norm(L_in)

# %%
# The numbers beside the paper's claims
# -------------------------------------
print(f"L_mm {ufm.svm_result_.status} (gap {ufm.svm_result_.gap:.1e})")
print(f"CE loss - entropy                 {ufm.history_['excess_loss'][-1]:.2e}   (-> 0)")
print(f"||W||_F, ||H||_F                  {np.linalg.norm(W):.1f}, {np.linalg.norm(H):.1f}"
      f"   (grow, from {ufm.history_['norm'][0]:.1f} jointly)")
print(f"||P_F(L) - L_in|| / ||L_in||      {finite_gap:.4f}   (-> 0)")
for key, label in (("logit_alignment", "cos(L, L_mm)"),
                   ("corrected_alignment", "cos(L - L_in, L_mm)"),
                   ("word_gram_alignment", "cos(W W^T, W_mm W_mm^T)"),
                   ("context_gram_alignment", "cos(H H^T, H_mm H_mm^T)"),
                   ("mm_proxy_alignment", "cos(L_mm, support proxy)")):
    print(f"{label:<33} {geo[key]:.4f}")
for lam, fit in zip(lambdas, path):
    print(f"lambda = {lam:g}: cos(L - L_in, L_mm) = {fit.alignment_:.4f}")
print("paper (Zhao et al. 2024, synthetic data): the loss reaches the entropy, the norms "
      "grow, the in-support logits converge to L_in, and the logits and Grams align with "
      "L_mm and its factors, exactly as the weight decay vanishes")

# %%
# The plots
# ---------
# Top: the excess loss, the norm, the alignments along training, and the
# regularization path.  Bottom: the pairwise cosines of the trained context and
# word embeddings beside those of ``H_mm`` and ``W_mm`` (read from the
# predicted Grams ``mm_context_gram_`` and ``mm_word_gram_``).


def cosines(G):
    """Pairwise cosines from a Gram matrix."""
    d = np.sqrt(np.diag(G))
    return G / np.outer(d, d)


h = ufm.history_
it = np.maximum(h["iteration"], 1)
fig, axes = plt.subplots(2, 4, figsize=(16, 7.5))
axes[0, 0].loglog(it, np.maximum(h["excess_loss"], 1e-12))
axes[0, 0].set(title="CE loss - entropy", xlabel="Adam step")
axes[0, 1].semilogx(it, h["norm"])
axes[0, 1].set(title="||(W, H)||_F", xlabel="Adam step")
for key in ("alignment_uncorrected", "alignment", "word_gram_alignment",
            "context_gram_alignment"):
    axes[0, 2].semilogx(it, h[key], label=key)
axes[0, 2].set(title="alignment with L_mm's geometry", xlabel="Adam step", ylim=(-0.1, 1.05))
axes[0, 2].legend(fontsize=8)
axes[0, 3].semilogx(lambdas, [f.alignment_ for f in path], "o-")
axes[0, 3].invert_xaxis()
axes[0, 3].set(title="cos(L - L_in, L_mm) on the path", xlabel="weight decay lambda")
for ax, (title, M) in zip(axes[1], (
        ("trained: cos(h_j, h_k)", cosines(H @ H.T)),
        ("H_mm: cos of rows", cosines(ufm.mm_context_gram_)),
        ("trained: cos(w_z, w_z')", cosines(W @ W.T)),
        ("W_mm: cos of rows", cosines(ufm.mm_word_gram_)))):
    im = ax.imshow(M, cmap="viridis", vmin=-1, vmax=1)
    ax.set_title(title)
    fig.colorbar(im, ax=ax)
fig.tight_layout()
plt.show()
