"""The analysis plane's subcommands of ``stragglerlab``: each module has ``configure(parser)`` and ``run(args)``."""
