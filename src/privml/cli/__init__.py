"""The ``privml`` command line: one entry point, a subcommand per job."""
