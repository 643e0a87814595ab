"""``python -m headwater.enricher.bench``: the enricher benchmark (:mod:`.query`)."""

import sys

from headwater.enricher.bench.query import main

if __name__ == "__main__":
    sys.exit(main())
