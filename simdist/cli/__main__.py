"""``python -m simdist.cli``: the same as the ``simdist`` command."""

from simdist.cli import main

main()
