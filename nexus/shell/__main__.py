"""`python -m nexus.shell [--db DIR | --url URL] ...`"""
import sys

from . import main

sys.exit(main())
