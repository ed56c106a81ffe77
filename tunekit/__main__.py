"""`python -m tunekit` runs the command line."""
import sys

from tunekit.cli.main import main

sys.exit(main())
