"""Subcommands of the ``aimcemu`` CLI (one module each; see aimcemu.cli)."""
