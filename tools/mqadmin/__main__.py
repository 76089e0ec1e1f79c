"""``python -m aiorocketmq.tools.mqadmin``: the same as the ``mqadmin`` console script."""

import sys

from .main import main

sys.exit(main())
