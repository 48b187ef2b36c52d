"""`python -m verdictgate` runs the CLI."""

from .cli import main

main()
