"""``python3 -m aimcemu`` is the same as the ``aimcemu`` command."""
import sys

from .cli import main

sys.exit(main())
