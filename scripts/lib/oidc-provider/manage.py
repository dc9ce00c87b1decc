#!/usr/bin/env python3
"""Django's command line for the tests' OpenID provider (see run.sh)."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "school_provider.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
