"""Operator tools: dead letters, offsets, lag, status (the ``headwater`` subcommands)."""
