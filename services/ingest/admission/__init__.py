"""Before any work: who calls, whether there is room, and each request's place in line.

``auth`` (gateways and their credentials), ``slots``, ``quotas``, ``body_reads`` and
``limits`` (the process's bounds, the ``Admission`` that checks them), ``ordering`` (each
gateway's issue order).
"""
