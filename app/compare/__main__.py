"""`python -m app.compare`: the headless comparison (`--help` lists its options)."""

import sys

from app.compare.cli import main

if __name__ == "__main__":  # imported (the layout test imports every module), it does nothing
    sys.exit(main())
