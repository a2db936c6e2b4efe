"""The order of the gallery: the NTP paper, max-margin attention, self-attention, your text."""

ORDER = [
    "plot_ntp_fig1_2d.py",
    "plot_ntp_app_b2.py",
    "plot_attention_fig1.py",
    "plot_attention_fig9.py",
    "plot_joint_fig3.py",
    "plot_self_attention_figs.py",
    "plot_transformers_svm.py",
    "plot_your_own_text.py",
    "plot_real_text_separability.py",
    "plot_embeddings_real_text.py",
    "plot_embeddings_synthetic.py",
    "plot_trained_transformer.py",
]


class PaperOrder:
    """sphinx-gallery ``within_subsection_order``: the pages in :data:`ORDER`, then the rest."""

    def __init__(self, src_dir):
        self.src_dir = src_dir

    def __call__(self, filename):
        return (ORDER.index(filename), filename) if filename in ORDER else (len(ORDER),
                                                                            filename)

    def __repr__(self):
        return "<PaperOrder>"
