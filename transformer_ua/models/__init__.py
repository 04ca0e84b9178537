"""Experiment models for Yun et al. 2020 Appendix H: a BERT-style encoder whose token
mixing layer is self-attention, average attention, bi-linear projection or depth-wise
separable (lightweight) convolution, per layer (``encoder``, ``mixing``)."""
