"""``python -m adaptemb`` runs the command line."""

from adaptemb.cli import main

main()
