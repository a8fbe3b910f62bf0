"""`python -m mtl_framework.cli ...`, as `mtl ...` (and `python -m mtl_framework ...`)."""
import sys

from mtl_framework.cli import main

sys.exit(main())
