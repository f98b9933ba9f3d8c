"""``python -m kb``."""

from kb.cli import main

main()
