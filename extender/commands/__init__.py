"""CLI commands: each module adapts argv to the service and prints results."""
