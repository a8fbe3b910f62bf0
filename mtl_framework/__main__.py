"""`python -m mtl_framework ...` is the `mtl` command line."""
import sys

from mtl_framework.cli import main

sys.exit(main())
