"""The stages of g_bar = g_v o g_c o g_q (Lemmas 4, 7-10; Appendix G) and their composition.

Importing the package registers every g_c kernel in ``gc_kernels.KERNELS``: 'core' and
'fast' there, 'sweep' in ``sweep`` (imported here for that registration only).
"""

from transformer_ua.yun.stages import sweep  # noqa: F401  (registers the 'sweep' kernel)
