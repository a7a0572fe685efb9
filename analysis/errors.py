"""The one exception type for mistakes a user made (a bad scenario, a missing file, a wrong option).

Every plane raises :class:`UserError` (or a subclass) at its edge; the ``stragglerlab`` command prints it as a
single line and exits with status 2. Anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake of the user's, reported as one line."""
