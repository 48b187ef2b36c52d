"""`python -m verdictgate` runs the CLI."""

from .cli.main import main

main()
