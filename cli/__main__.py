"""`python -m cli ...`: the same as the `attnlab` console script."""

import sys

from cli.main import main

sys.exit(main())
