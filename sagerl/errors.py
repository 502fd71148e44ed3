"""Errors a user can cause. The CLI prints them as one line, without a traceback, and exits non-zero."""


class SagerlError(Exception):
    """Base class of every error caused by user input (data, configuration, paths)."""


class DataError(SagerlError):
    """A dataset that cannot be found or a row that cannot be read (the message names file, line and field)."""


class ConfigError(SagerlError):
    """An unknown preset, an unknown or ill-typed configuration key, or an unsupported option."""


class ModelLoadError(SagerlError):
    """A model path or id that does not load."""
