"""skntp: the implicit bias of next-token prediction and softmax attention.

scikit-learn estimators fitted by gradient descent *and* by the max-margin
limit that theory says gradient descent converges to:

* :class:`NTPDecoderClassifier`: NTP with a linear decoder (NTP-SVM, ``W*``).
* :class:`AttentionSelector`: attention token selection (ATT-SVM, GMM/LMM).
* :class:`JointAttentionSVM`: head and attention trained jointly (relaxed ATT-SVM).
* :class:`KeyQuerySelector`: per-input queries, ``W`` or ``Q K^T`` trained, value heads
  (W-SVM, KQ-SVM).
* :class:`NTPAttentionClassifier`: self-attention for NTP (Graph-SVM, ``W^cyc``).
* :class:`NTPEmbeddingClassifier`: NTP with trained word and context embeddings
  (NTP-UFM: the logit-space NTP-SVM ``L_mm``, nuclear norm).

The explicit programs are in :mod:`skntp.svm`, the papers' data in
:mod:`skntp.datasets`.
"""

import logging

from .attention import AttentionSelector, JointAttentionSVM
from .decoder import NTPDecoderClassifier
from .key_query import KeyQuerySelector
from .self_attention import NTPAttentionClassifier

__version__ = "0.1.0"

# a library's loggers stay silent unless the application configures logging
logging.getLogger("skntp").addHandler(logging.NullHandler())

__all__ = [
    "AttentionSelector",
    "JointAttentionSVM",
    "KeyQuerySelector",
    "NTPAttentionClassifier",
    "NTPDecoderClassifier",
    "__version__",
]

from .embeddings import NTPEmbeddingClassifier  # noqa: E402

__all__ += ["NTPEmbeddingClassifier"]
