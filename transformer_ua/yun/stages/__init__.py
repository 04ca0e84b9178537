"""The stages of g_bar = g_v o g_c o g_q (Lemmas 4, 7-10; Appendix G) and their composition."""
