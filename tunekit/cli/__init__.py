"""The command line (the top layer). Plugins add subcommands through the `tunekit_commands` hook."""
