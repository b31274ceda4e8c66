"""`python -m attnlab ...`: the same as the `attnlab` console script."""

import sys

from attnlab.cli.main import main

sys.exit(main())
