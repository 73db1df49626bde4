"""``python -m jaxsynth``: the command line (``jaxsynth.cli``)."""

import sys

from jaxsynth.cli import main

if __name__ == "__main__":
    sys.exit(main())
