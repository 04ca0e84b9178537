"""The certifier of any standard Transformer, and training to certify."""
