"""The one base class of every bad-input error: what the CLI (exit 2) and the studio show as a plain message.

An error raised because of what a person typed, chose or pointed at (a setting, a data file, a model name, a
checkpoint, the home folder) subclasses `InputError` next to its usual base (`class ConfigError(InputError,
ValueError)`), so `except ValueError` callers still work; anything else is a bug and shows its traceback.
Here, not in the engine, because storage raises one too (HomeError) and must not import cookbook_engine.
"""

from __future__ import annotations


class InputError(Exception):
    """Bad input; the message names what is wrong and, where it can, what to do instead."""


# What the CLI and the studio catch as bad input: a missing file named in the settings is bad input too.
BAD_INPUT: tuple[type[Exception], ...] = (InputError, FileNotFoundError)
