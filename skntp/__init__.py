"""skntp: the implicit bias of next-token prediction and softmax attention.

scikit-learn estimators fitted by gradient descent *and* by the max-margin
limit that theory says gradient descent converges to.
"""

from .decoder import NTPDecoderClassifier

__version__ = "0.1.0"

__all__ = ["NTPDecoderClassifier", "__version__"]
