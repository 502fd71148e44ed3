"""``python -m sagerl.cli``: the same as the ``sagerl`` command."""

from sagerl.cli import main

main()
