"""file: URLs (RFC 8089) as the local paths they name: `file:/p` (the one-slash local
form), `file:///p` and `file://localhost/p`, percent-decoded (`%20` is a space).

`--workdir=file:/path` has no "://", so it was taken for a relative path and wrote into
./file:/path under the current folder while the run's summary printed file:/path.
"""

import urllib.parse

from vit_jax.base import errors


def as_local(path: str) -> str:
  """The local path a file: URL names; any other path unchanged."""
  if not str(path).lower().startswith("file:"):
    return path
  parts = urllib.parse.urlsplit(str(path))
  if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
    raise errors.InvalidInput(
        f"{path} is not a file URL of this machine: use file:///ABSOLUTE/PATH (or file:/"
        "ABSOLUTE/PATH), or the path itself")
  return urllib.parse.unquote(parts.path)
