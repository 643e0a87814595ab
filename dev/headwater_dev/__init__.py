"""Headwater's dev tooling (the ``headwater-dev`` distribution in ``dev/``, not in the wheel).

``devstack``: the embedded broker and the whole pipeline on one machine (``make run``);
``bench``: the benchmarks. Both add groups to the ``headwater`` command through the
entry-point group ``headwater.commands``. Dev tooling imports production code, never the
other way round (tests/test_layout.py).
"""
