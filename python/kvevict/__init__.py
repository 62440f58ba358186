from kvevict._ext import Error, ext  # noqa: F401
