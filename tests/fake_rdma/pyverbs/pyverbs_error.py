"""Same exception classes, messages and ``error_code`` as pyverbs.pyverbs_error."""

import os


class PyverbsError(Exception):
    def __init__(self, msg, error_code=-1):
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg)


class PyverbsRDMAError(PyverbsError):
    def __init__(self, msg, error_code=-1):
        super().__init__(msg, error_code)
        self._error_code = error_code

    @property
    def error_code(self):
        return self._error_code


class PyverbsUserError(PyverbsError):
    def __init__(self, msg):
        super().__init__(msg)
