"""The write path: check each message of an admitted request and issue it in its turn."""
