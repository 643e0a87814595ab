"""The edge gateway program: its config file, runner and health (``headwater gateway run``)."""
