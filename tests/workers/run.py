"""``tabascal run`` with the store's row reads logged (argv: the command's arguments)."""

import logging
import sys

logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s", stream=sys.stdout)
logging.getLogger("tabascal.store.reader").setLevel(logging.DEBUG)

from tabascal.cli import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
