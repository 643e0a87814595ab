"""``python -m headwater_dev.bench.enricher``: the enricher benchmark (:mod:`.query`)."""

import sys

from headwater_dev.bench.enricher.query import main

if __name__ == "__main__":
    sys.exit(main())
