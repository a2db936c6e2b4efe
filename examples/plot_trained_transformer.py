"""
A trained transformer, read: its decoder and its logits against the NTP limits
==============================================================================

A language model ends in a linear decoder: the logits after context ``j`` are
``W h_j``, ``h_j`` its last hidden state and ``W`` (``V x d``) its
unembedding.  Two papers predict where training takes that decoder.

**The papers' claims.** (i) Thrampoulidis (2024), Thm. 4.1: on fixed context
embeddings that are NTP-separable, gradient descent on ``W`` drives the loss (2)
to the entropy, ``W`` grows along the NTP-SVM direction ``W^mm`` (cosine -> 1
once the finite part is removed) and its projection on the subspace ``F``
(eq. (5)) converges to ``W*``, the solution of the log-odds equations (3).
(ii) Zhao, Behnia, Vakilian, Thrampoulidis (2024), NTP-UFM: when the context
embeddings are trained too, the logits grow along ``L_mm``, the minimum
nuclear-norm logit matrix that separates every context's next words from the
rest, and the word and context Gram matrices follow its factors.

Here a small causal transformer is trained on real text, the help topics of
Python's language reference (``load_text_ntp(corpus="python")``), and every
100 steps its own last hidden states ``H`` are handed to the package:
:func:`skntp.reading.decoder_geometry` predicts the decoder's limits from
``H`` (``NTPDecoderClassifier(solver="svm")`` on them) and measures ``W``
against them; :func:`skntp.metrics.logit_geometry` measures the logits
``H W^T`` against ``L_mm``.  The model is trained twice, with and without
weight decay.  torch is needed (``pip install 'skntp[torch]'``).
"""

# %%
# The text: distinct contexts and their next words
# ------------------------------------------------
# The 20 most frequent words; every prefix of every run of them, cut to its
# last two words, is a context (NTP paper, App. D).  The model is trained on
# the ``m`` distinct contexts with their next-word distributions ``p_j`` and
# weights ``pi_j``: the NTP loss (2), the same loss as the cross-entropy over
# all the text's positions.  (``load_text_ntp``'s own context embeddings are
# not used: the transformer makes its own.)
import time
from collections import Counter

import matplotlib.pyplot as plt
import numpy as np
import torch
from threadpoolctl import threadpool_limits

from skntp import NTPDecoderClassifier
from skntp.datasets import load_text_ntp
from skntp.metrics import logit_geometry
from skntp.reading import decoder_geometry, torch_decoder_arrays
from skntp.svm import ntp_logit_svm

start = time.perf_counter()
# every product here is small: one thread each for torch and BLAS (a pool of threads
# only waits for cores that the machine's other work holds)
torch.set_num_threads(1)
threadpool_limits(limits=1)
torch.manual_seed(0)
torch.use_deterministic_algorithms(True)

K, V = 2, 20
text = load_text_ntp(corpus="python", context_size=K, n_words=V, embedding="words",
                     n_features=1)
words = {w: i for i, w in enumerate(text.vocabulary)}
pairs = Counter(zip(text.contexts, text.target))
contexts = list(dict.fromkeys(text.contexts))
row = {c: j for j, c in enumerate(contexts)}
m = len(contexts)
counts = np.zeros((m, V))
for (c, w), n in pairs.items():
    counts[row[c], words[w]] += n
pi = counts.sum(axis=1) / counts.sum()
P = counts / counts.sum(axis=1, keepdims=True)
support = P > 0
PAD = V  # contexts shorter than K are padded on the left
ids = torch.full((m, K), PAD)
for c, j in row.items():
    ids[j, K - len(c):] = torch.tensor([words[w] for w in c])
entropy = -np.sum(pi[:, None] * P * np.log(np.where(support, P, 1.0)))
print(f"{len(text.target)} next-word predictions, m = {m} distinct contexts, V = {V} "
      f"words, {int((support.sum(axis=1) > 1).sum())} contexts followed by more than one "
      f"word; entropy {entropy:.4f} nats")

# %%
# The model
# ---------
# A GPT in miniature: token and position embeddings, two pre-LayerNorm blocks of
# causal multi-head self-attention (4 heads) and an MLP, a final LayerNorm and an
# unembedding ``lm_head`` without bias; width ``d = 128``.  The logits of a context
# are those of its last position.  :func:`~skntp.reading.torch_decoder_arrays`
# reads ``H`` as the input of ``lm_head`` (a forward hook: no code of the model is
# copied) and ``W`` as its weight.
D = 128


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = torch.nn.LayerNorm(D), torch.nn.LayerNorm(D)
        self.attn = torch.nn.MultiheadAttention(D, 4, batch_first=True)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(),
                                       torch.nn.Linear(4 * D, D))
        self.register_buffer("causal", torch.triu(torch.ones(K, K, dtype=torch.bool), 1))

    def forward(self, x):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=self.causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class TinyGPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = torch.nn.Embedding(V + 1, D)
        self.pos = torch.nn.Parameter(0.02 * torch.randn(K, D))
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.ln_f = torch.nn.LayerNorm(D)
        self.lm_head = torch.nn.Linear(D, V, bias=False)

    def forward(self, x):
        h = self.ln_f(self.blocks(self.tok(x) + self.pos))
        return self.lm_head(h[:, -1])


# %%
# Training, measured every 100 steps
# ----------------------------------
# Full-batch AdamW (lr 3e-3) on the loss (2), 1,500 steps, once without and once
# with weight decay 0.1.  ``L_mm`` depends on the supports only: it is solved once.
L_mm = ntp_logit_svm(support).primal
STEPS, EVERY = 1500, 100
target, weight = torch.as_tensor(P, dtype=torch.float32), torch.as_tensor(pi,
                                                                         dtype=torch.float32)


def train(weight_decay):
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=weight_decay)
    rows = []
    for step in range(STEPS + 1):
        if step % EVERY == 0:
            H, W, _ = torch_decoder_arrays(model, ids)
            dec = decoder_geometry(H, W, P, sample_weight=pi)
            logit = logit_geometry(support, word_embeddings=W, context_embeddings=H,
                                   L_mm=L_mm)
            rows.append({"step": step, "loss": dec.loss, "infimum": dec.loss_infimum,
                         "alignment": dec.alignment,
                         "uncorrected": dec.alignment_uncorrected,
                         "finite": dec.finite_distance / dec.finite_norm,
                         "radius": dec.mm_coordinate, "norm": dec.norm,
                         "separable": dec.is_ntp_separable,
                         "logit": logit["logit_alignment"],
                         "word_gram": logit["word_gram_alignment"],
                         "context_gram": logit["context_gram_alignment"]})
        if step == STEPS:
            return model, H, dec, {k: np.array([r[k] for r in rows]) for k in rows[0]}
        opt.zero_grad()
        loss = -(weight * (target * torch.log_softmax(model(ids), dim=1)).sum(dim=1)).sum()
        loss.backward()
        opt.step()


runs = {}
for wd in (0.0, 0.1):
    runs[wd] = train(wd)
    _, _, dec, h = runs[wd]
    print(f"\nweight decay {wd}: NTP-separable hidden states at every measurement: "
          f"{bool(np.all(h['separable']))}; loss_infimum_ - entropy at most "
          f"{np.max(np.abs(h['infimum'] - entropy)):.1e}")
    print(f"{'step':>5} {'loss - H':>9} {'cos(W-W*,Wmm)':>13} {'cos(W,Wmm)':>10} "
          f"{'|P_F W-W*|/|W*|':>15} {'R':>5} {'|W|':>5} {'cos(L,Lmm)':>10} "
          f"{'word Gram':>9} {'ctx Gram':>8}")
    for i in range(len(h["step"])):
        print(f"{h['step'][i]:5d} {h['loss'][i] - h['infimum'][i]:9.2e} "
              f"{h['alignment'][i]:13.3f} {h['uncorrected'][i]:10.3f} {h['finite'][i]:15.3f} "
              f"{h['radius'][i]:5.2f} {h['norm'][i]:5.2f} {h['logit'][i]:10.3f} "
              f"{h['word_gram'][i]:9.3f} {h['context_gram'][i]:8.3f}")

# %%
# The decoder alone on the final hidden states
# --------------------------------------------
# The same steps of normalized gradient descent on ``W`` alone, the final ``H`` held
# fixed (the setting of Thm. 4.1), from zero: how far the theorem's own dynamics get
# in 1,500 steps.
H_final = runs[0.0][1]
ngd = NTPDecoderClassifier(solver="ngd", lr=0.1, max_iter=STEPS, vocabulary=V, init="zeros",
                           record_every=STEPS).fit(H_final, P, sample_weight=pi)
print(f"\nNGD on the decoder alone, {STEPS} steps on the final H (weight decay 0): "
      f"cos(W - W*, W^mm) = {ngd.alignment_:.3f}, loss - H = "
      f"{ngd.history_['loss'][-1] - entropy:.2e}")

# %%
# The softmax bottleneck
# ----------------------
# The logits ``H W^T`` have rank at most ``d``.  Here ``d = 128 > V``, so any
# logit matrix is reachable; a model narrower than the vocabulary is not: the
# largest cosine a rank-``r`` matrix can have with ``L_mm`` is the share of its
# ``r`` leading singular values.
sv = np.linalg.svd(L_mm - L_mm.mean(axis=0), compute_uv=False)
caps = {r: float(np.sqrt(np.sum(sv[:r] ** 2) / np.sum(sv ** 2))) for r in (2, 4, 8, 16)}
print("largest cos(L, L_mm) at logit rank r: "
      + ", ".join(f"r = {r}: {c:.3f}" for r, c in caps.items())
      + f" (rank of L_mm: {int(np.sum(sv > 1e-6 * sv[0]))})")

# %%
# The numbers beside the papers' claims
# -------------------------------------
for wd, (_, _, _, h) in runs.items():
    best = int(np.nanargmax(h["alignment"]))
    print(f"weight decay {wd}: loss - entropy {h['loss'][-1] - entropy:.1e}; "
          f"cos(W - W*, W^mm) {h['alignment'][-1]:.3f} (best {h['alignment'][best]:.3f} "
          f"at step {h['step'][best]}); ||P_F(W) - W*|| / ||W*|| {h['finite'][-1]:.3f}; "
          f"cos(L, L_mm) {h['logit'][-1]:.3f}")
print("paper (NTP, Thm. 4.1): for GD on W with H fixed, loss -> entropy, "
      "cos(W - W*, W^mm) -> 1, P_F(W) -> W*; paper (NTP-UFM): cos(L, L_mm) -> 1 as the "
      "weight decay vanishes")
print(f"run time {time.perf_counter() - start:.0f} s")

# %%
# The plots
# ---------
fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), constrained_layout=True)
radius_axis = axes[1, 0].twinx()  # R = <W - W*, W^mm / ||W^mm||>, on its own scale
for wd, (_, _, _, h) in runs.items():
    style = {"ls": "-" if wd == 0 else "--"}
    tag = f"decay {wd}"
    axes[0, 0].semilogy(h["step"], h["loss"] - h["infimum"], label=tag, **style)
    axes[0, 1].plot(h["step"], h["alignment"], label=f"cos(W - W*, W^mm), {tag}",
                    color="C0", **style)
    axes[0, 1].plot(h["step"], h["uncorrected"], label=f"cos(W, W^mm), {tag}",
                    color="C1", **style)
    axes[1, 0].plot(h["step"], h["finite"], label=f"||P_F W - W*|| / ||W*||, {tag}",
                    color="C2", **style)
    radius_axis.plot(h["step"], h["radius"], label=f"R, {tag}", color="C3", **style)
    axes[1, 1].plot(h["step"], h["logit"], label=f"cos(L, L_mm), {tag}", color="C0",
                    **style)
    axes[1, 1].plot(h["step"], h["word_gram"], label=f"word Gram, {tag}", color="C4",
                    **style)
axes[0, 1].axhline(ngd.alignment_, color="k", lw=0.8, label="NGD on W alone")
axes[0, 0].set(title="loss - loss_infimum_ (= entropy here)", xlabel="step")
axes[0, 1].set(title="decoder alignment", xlabel="step", ylim=(-0.05, 1.05))
axes[1, 0].set(title="finite part (left) and radius R along W^mm (right)", xlabel="step",
               ylabel="||P_F W - W*|| / ||W*||")
radius_axis.set(ylabel="R")
radius_axis.legend(fontsize=7, loc="center right")
axes[1, 1].set(title="logit alignment (NTP-UFM)", xlabel="step", ylim=(-0.05, 1.05))
for ax in axes.flat:
    ax.legend(fontsize=7, loc="upper center" if ax is axes[1, 0] else "best")
plt.show()

# %%
# What agrees with the theory, and what does not
# ----------------------------------------------
# **Agrees.** The loss approaches its floor: with ``d = 128 > m`` the hidden states
# are linearly independent, hence NTP-separable and NTP_H-compatible at every
# measurement, and ``loss_infimum_`` is the entropy (the loss ends about 1e-4
# nats above it).  The unembedding turns toward the max-margin direction
# predicted from the model's own hidden states (``cos(W - W*, W^mm)`` from 0 to
# about 0.87 without weight decay) while its norm grows, and its finite part sits
# within about 1 % of ``W*`` from step 600 on: the log-odds of the next words are
# fitted first, the rest of the norm goes along ``W^mm``.  The logits align with
# ``L_mm`` to about 0.87-0.88, as the NTP-UFM predicts for trained embeddings.
#
# **Does not, or not yet.**
#
# * *Weight decay* (AdamW's decoupled decay, 0.1) pulls ``W`` back: at step 1,500
#   the loss is several times further above the entropy, the radius along
#   ``W^mm`` is smaller, the finite part farther from ``W*`` and the alignment
#   lower (about 0.81 against 0.87), below its own best of a few hundred steps
#   earlier.  Thm. 4.1 has no decay.  The NTP-UFM's claim is for vanishing decay,
#   and its logit alignment is not hurt by this small one.
# * *Finite training*: the direction converges slowly (like ``1/log t`` for
#   gradient descent); 1,500 steps leave a cosine of about 0.87, what normalized
#   GD on the decoder alone reaches from the same hidden states in as many steps,
#   and the cosine of the whole of ``W`` (``W*`` included) is lower still.
# * *The optimizer and the moving features*: AdamW is not gradient descent (its
#   implicit bias on a decoder is in another norm, see the optimizer gallery page),
#   and ``H`` changes at every step, so ``W^mm`` is a moving target.
# * *The softmax bottleneck*: here ``d > V``; real models have ``d < V``, where the
#   logits have rank at most ``d`` and their alignment with ``L_mm`` is capped by
#   the share of ``L_mm``'s leading singular values (printed above: a width of 8
#   would cap it at about what this model reaches).  And ``d > m``
#   here, where real models have ``d < m``: their hidden states are then not
#   NTP-separable, and :func:`~skntp.reading.decoder_geometry` compares ``W`` with
#   ``W^mm_I`` and ``W_fin`` instead (the limits of the separable rows and of the
#   rest), at a higher cost per measurement.
