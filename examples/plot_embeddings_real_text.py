"""
Trained embeddings on real text: the logits against ``L_mm`` (NTP-UFM)
======================================================================

Zhao, Behnia, Vakilian, Thrampoulidis, *Implicit Geometry of Next-token
Prediction* (2024).  With free word embeddings ``W`` and one free embedding per
distinct context (the unconstrained-features model, NTP-UFM), the logits
``L = W H`` of the weight-decayed cross-entropy split, as the decay vanishes,
into a finite in-support part ``L_in`` and a part growing along ``L_mm``, the
minimum-nuclear-norm logits with margin 1 between every context's in-support
and out-of-support words (the logit-space NTP-SVM).

**The paper's claims.** (i) The logits of the UFM align with ``L_mm`` (its
regularization-path theorem); (ii) the word and context Gram matrices align
with those of the balanced factors of ``L_mm``; (iii) ``L_mm`` is close to the
closed-form proxy, the centered support matrix; (iv) real models trained on
real text show the same geometry, approximately.

Here: real English text that ships with Python (its help topics,
``load_text_ntp(corpus="python")``), two-word contexts over its 20 most
frequent words.  The UFM (:class:`~skntp.NTPEmbeddingClassifier`) is trained
by GD with a small weight decay; a small torch model (word embeddings of the
two context words, one hidden layer, an unembedding without bias) is trained
with AdamW on the same distinct contexts and their next-word frequencies.
Both are measured by :func:`skntp.metrics.logit_geometry`.
"""

# %%
# The data and the UFM
# --------------------
# Each distinct context is one free embedding; the next-word frequencies of the
# text are the soft labels.  ``solver="gd"`` with weight decay 1e-3 runs near
# the minimizer of the decayed loss (the theorem's path at one ``lambda``).
import importlib.util
import warnings

import matplotlib.pyplot as plt
import numpy as np

from skntp import NTPEmbeddingClassifier
from skntp.datasets import load_text_ntp
from skntp.metrics import logit_geometry

data = load_text_ntp(corpus="python", n_words=20, embedding="onehot")
X, y = data.data, data.target
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ufm = NTPEmbeddingClassifier("gd", lr=1.0, weight_decay=1e-3, max_iter=6000,
                                 record_every=100, random_state=0).fit(X, y)
P = ufm.next_token_probs_
support = P > 0
L_mm = ufm.svm_result_.primal
m, V = P.shape
print(f"m = {m} distinct contexts, V = {V} words, {int((support.sum(1) > 1).sum())} "
      f"contexts with more than one next word; L_mm certified ({ufm.svm_result_.status}, "
      f"gap {ufm.svm_result_.gap:.1e}, method {ufm.svm_result_.method})")


def measure(W, H):
    """The geometry of a model's word embeddings ``W`` (V x d) and context
    embeddings ``H`` (m x d), whose logits are ``H W^T``; ``corrected_alignment``:
    the cosine with ``L_mm`` once ``L_in`` is removed."""
    return logit_geometry(support, word_embeddings=W, context_embeddings=H, L_mm=L_mm,
                          finite_component=ufm.finite_component_)


rows = {"UFM (GD, decay 1e-3)": measure(ufm.word_embeddings_, ufm.context_embeddings_)}

# %%
# A small torch model on the same contexts
# ----------------------------------------
# Input: the two context words (a padding index where the context is shorter);
# each word gets a 16-dimensional embedding, the two are concatenated, one
# ``tanh`` layer of 32 units gives the context embedding ``h_j``, and an
# unembedding without bias gives the logits ``h_j^T w_v``.  AdamW (lr 0.01,
# weight decay 1e-4), soft-label cross-entropy weighted by the contexts'
# frequencies.  torch is optional: without it this part is skipped.
if importlib.util.find_spec("torch") is not None:
    import torch

    torch.manual_seed(0)
    lookup = {np.asarray(v).tobytes(): c for c, v in zip(data.contexts, X)}
    words = {w: i for i, w in enumerate(data.vocabulary)}
    pad = len(words)
    ids = np.full((m, 2), pad)
    for j, row in enumerate(ufm.contexts_):
        ctx = lookup[np.asarray(row).tobytes()][-2:]
        ids[j, 2 - len(ctx):] = [words.get(w, pad) for w in ctx]
    model = torch.nn.Sequential(torch.nn.Embedding(pad + 1, 16), torch.nn.Flatten(),
                                torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, V, bias=False)).double()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=1e-4)
    inputs, target = torch.as_tensor(ids), torch.as_tensor(P)
    pi = torch.as_tensor(ufm.context_weights_)
    # products this small gain nothing from torch's thread pool, and its threads spin
    # for cores a busy machine does not give them (2 s of CPU here against 15-50 s)
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    for _ in range(3000):
        opt.zero_grad()
        logq = torch.log_softmax(model(inputs), dim=1)
        loss = -(pi * (target * logq).sum(dim=1)).sum()
        loss.backward()
        opt.step()
    torch.set_num_threads(n_threads)
    with torch.no_grad():
        hidden = model[:4](inputs).numpy()
    W_t = model[4].weight.detach().numpy()
    rows["MLP (torch, AdamW)"] = measure(W_t, hidden)
    print(f"MLP: cross-entropy {loss.item():.4f} against the entropy {ufm.entropy_:.4f}")
else:
    print("torch is not installed (pip install 'skntp[torch]'): the MLP is skipped")

# %%
# The numbers beside the paper's claims
# -------------------------------------
keys = [("logit_alignment", "cos(L, L_mm)"), ("corrected_alignment", "cos(L - L_in, L_mm)"),
        ("proxy_alignment", "cos(L, proxy)"), ("word_gram_alignment", "word Gram"),
        ("context_gram_alignment", "context Gram")]
print(f"{'model':>22} " + " ".join(f"{label:>20}" for _, label in keys))
for name, geo in rows.items():
    print(f"{name:>22} " + " ".join(f"{geo[k]:20.3f}" for k, _ in keys))
geo = rows["UFM (GD, decay 1e-3)"]
print(f"L_mm against the proxy: cosine {geo['mm_proxy_alignment']:.4f}, normalized "
      f"distance {geo['proxy_distance']:.3f}")
print("paper (Zhao et al. 2024): (i) the UFM's logits align with L_mm as the weight "
      "decay vanishes; (ii) the word and context Grams with L_mm's factors; (iii) the "
      "proxy is close to L_mm; (iv) trained models show the geometry approximately")

# %%
# The plots
# ---------
# Left: the cosines of both models.  Right: the UFM's alignment along training.
fig, axes = plt.subplots(1, 2, figsize=(12, 4))
x = np.arange(len(keys))
for i, (name, geo) in enumerate(rows.items()):
    axes[0].bar(x + 0.4 * i, [geo[k] for k, _ in keys], width=0.4, label=name)
axes[0].set_xticks(x + 0.2, [label for _, label in keys], rotation=20)
axes[0].set(ylim=(0, 1.05), ylabel="cosine")
axes[0].legend()
h = ufm.history_
for k in ("alignment", "word_gram_alignment", "context_gram_alignment"):
    axes[1].semilogx(h["iteration"][1:], h[k][1:], label=k)
axes[1].set(xlabel="GD step", ylim=(0, 1.05))
axes[1].legend()
fig.tight_layout()
plt.show()
