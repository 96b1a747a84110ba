"""``python -m triolog.devcluster``: see :mod:`triolog.devcluster.cluster`."""

import sys

from .cluster import main

sys.exit(main())
