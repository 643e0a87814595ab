"""Headwater."""
