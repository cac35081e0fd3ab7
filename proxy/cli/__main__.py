"""``python -m proxy.cli``: the same as the ``handoff`` command."""

import sys

from proxy.cli.main import main

sys.exit(main())
