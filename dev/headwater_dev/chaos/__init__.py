"""``headwater chaos``: fail parts of a dev stack or a staging cluster on purpose."""
