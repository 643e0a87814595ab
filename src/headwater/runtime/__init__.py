"""What every Headwater process runs on: settings, start-up, logs, telemetry, Java, statistics.

``settings`` declares each setting once (its variable, flag, ``--help`` line and docs row
follow from that); ``env`` reads typed ``HEADWATER_*`` variables; ``startup`` turns a bad
setting into one line on stderr and exit 2; ``logs`` writes JSON lines with the trace id;
``telemetry`` and ``conventions`` set up OpenTelemetry with the project's names; ``jvm``
finds Java and the jars ``make install`` copied; ``stats`` is the one percentile convention
of the figures Headwater prints.
"""
