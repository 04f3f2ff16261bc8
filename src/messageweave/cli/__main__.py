"""`python -m messageweave.cli`: the same as the `messageweave` console script."""

from messageweave.cli import main

main()
