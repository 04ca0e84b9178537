"""Studies: ladders, sweeps and fits over the constructions, callable from binaries and
notebooks alike (``size_law``: the certified size-vs-epsilon law; ``mixing_sweep``: every
Section H run of a config and its reports)."""
