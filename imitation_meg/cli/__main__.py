"""``python -m imitation_meg.cli``: the ``imitation-meg`` console script."""

import sys

from imitation_meg.cli import main

if __name__ == "__main__":
    sys.exit(main())
