"""Errors a user can cause. The CLI prints them as one line, without a traceback, and exits non-zero."""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name when the message is empty), for one-line errors."""
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class SagerlError(Exception):
    """Base class of every error caused by user input (data, configuration, paths)."""


class DataError(SagerlError):
    """A dataset that cannot be found or a row that cannot be read (the message names file, line and field)."""


class ConfigError(SagerlError):
    """An unknown preset, an unknown or ill-typed configuration key, or an unsupported option."""


class ModelLoadError(SagerlError):
    """A model path or id that does not load."""


class WriteError(SagerlError):
    """A file that cannot be written (disk full, no permission); the message names the path."""
