#!/usr/bin/env python
"""Django's management commands from a checkout; installed from the package, the `reckon` command."""

from config.cli import main

if __name__ == "__main__":
    main()
