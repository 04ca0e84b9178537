"""The variants of the Theorem 2/3 construction: one file each, one registry."""
