"""Each command's options, one module for each module of ``cli/`` that runs a command: what ``parser.py`` builds
``--help`` and the argument checks from, importing nothing a command needs only to run (the HTTP client, the
engines, Rich, the store), so ``--help`` and a mistyped argument answer at once."""
