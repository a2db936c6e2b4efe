"""Data recipes of the papers implemented by skntp, and helpers for your own text.

NTP with a linear decoder (Thrampoulidis 2024): :func:`make_ntp_data` (App. B.2 /
A.2 recipe), :func:`make_ntp_2d_example` (Fig. 1/2), :func:`ntp_from_sequences`
(autoregressive data, App. D) and :func:`load_text_ntp` (English text);
NTP-SVM programs at scale, with tied supports and no exchangeable tokens:
:func:`make_ntp_svm_data`.  Attention token selection (Tarzanagh et al. 2023,
Fig. 1, 8, 9): :func:`make_attention_fig1a` ... :func:`make_attention_random`;
the joint model (Fig. 3): :func:`make_joint_fig3`; one query per input
("Transformers as Support Vector Machines"): :func:`make_key_query_data`.
Self-attention NTP (Li et al. 2024, App. D): :func:`make_token_priority_data`.  Your own text:
:class:`TokenEncoder` maps sentences to token ids, :class:`ContextEmbedder` maps
contexts (token ids) to vectors by their tokens, the same for training and new text,
and :func:`ntp_from_sequences` turns sequences into contexts and next tokens.
"""

from ._attention import (
    make_attention_fig1a,
    make_attention_fig1b,
    make_attention_fig1c,
    make_attention_fig8,
    make_attention_random,
    make_key_query_data,
)
from ._embedder import ContextEmbedder
from ._graphs import make_token_priority_data
from ._joint import make_joint_fig3
from ._ntp import make_ntp_2d_example, make_ntp_data, ntp_from_sequences
from ._separable import make_ntp_svm_data
from ._text import load_text_ntp
from ._tokens import TokenEncoder

__all__ = [
    "ContextEmbedder",
    "TokenEncoder",
    "load_text_ntp",
    "make_attention_fig1a",
    "make_attention_fig1b",
    "make_attention_fig1c",
    "make_attention_fig8",
    "make_attention_random",
    "make_joint_fig3",
    "make_key_query_data",
    "make_ntp_2d_example",
    "make_ntp_data",
    "make_ntp_svm_data",
    "make_token_priority_data",
    "ntp_from_sequences",
]
