"""Exact and certified arithmetic for realized networks (``ball``: arb ball evaluation)."""
