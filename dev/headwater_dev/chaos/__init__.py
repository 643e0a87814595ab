"""``headwater chaos``: fail parts of a dev stack on purpose, to see the guarantees hold."""
