"""Where the enricher's rows come from: the ingest and master-data topics, and their keys.

The Kafka source itself is opened in :mod:`headwater.enricher.driver.job` (the only module
with ``readStream``); :mod:`.keys` gives its rows the keyed state's key in Spark SQL, on the
driver, so that the JVM computes it.
"""
