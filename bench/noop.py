"""The baseline job of the throughput benchmark: nothing to import, nothing to do."""


def noop() -> None:
    """Do nothing."""
