"""Where the fit scripts find the fit data: real-data/<folder>/<file> under the
directory given on the command line, else ../shared/real-data beside the
project. One helper, so every fit script says the same when it is absent."""
import os
import sys


def path(args, folder, name, who):
    """The file's path, or None after saying on stderr that it is missing.
    args: the script's positional arguments (the first, if any, is the
    real-data directory)."""
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                                             "real-data")
    p = os.path.join(root, folder, name)
    if not os.path.exists(p):
        print(f"{who}: {p} not found", file=sys.stderr)
        return None
    return p
