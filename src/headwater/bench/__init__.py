"""Benchmarks that print numbers and ratios against ceilings measured in the same run."""
