"""``python -m cdcnorm``: the ``cdcnorm`` command."""

from cdcnorm.cli import main

main()
