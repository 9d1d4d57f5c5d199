"""The applications: the CLI and its commands, the gin root configurable, export and replay."""
