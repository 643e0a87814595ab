"""Subscriber client: at-least-once consumption of completion and common-format events."""
