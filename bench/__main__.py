"""`python -m bench` — see bench/__init__.py and bench/runner.py."""
import sys

from .runner import main

sys.exit(main())
