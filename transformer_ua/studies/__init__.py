"""Studies: ladders, sweeps and fits over the constructions, callable from binaries and
notebooks alike (``size_law``: the certified size-vs-epsilon law; ``approximation``: the
main job; ``certification``: Theorems 2 and 3 certified, each bound against a Monte Carlo;
``one_layer_compare``, ``one_layer_certificate``: one softmax layer vs the paper's;
``realization_certified``, ``lemma6``: Lemma 6 certified at scale, and measured;
``mixing_sweep``: every Section H run of a config and its reports)."""
