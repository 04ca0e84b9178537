"""The certifier of any standard Transformer (network_dict format) and its runtime probe."""
