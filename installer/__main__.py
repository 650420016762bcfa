"""``python -m installer`` and the zipapp entry point."""

import sys

from installer.cli.root import main

sys.exit(main())
