"""`python -m private_tmpfs SIZE|FOLDER MODULE RUNS`: a fresh tmpfs of SIZE, or FOLDER (a
bind mount: its files outlive the process), mounted at /mnt in a private user and mount
namespace (what `unshare --user --map-root-user --mount` sets up), then
helpers.run_in_one_process(MODULE, RUNS) (RUNS: JSON), for tests that fill a disk or turn
it read-only (from outside, with nsenter: see tests/test_resume.py).

Meant to be started by tests/fork_server.py, whose children skip a new process's
TensorFlow import (~4 s of CPU): a forked child has a single thread, as unshare(2) needs
to enter a new user namespace. Nothing may start a thread before enter() (imports below
it)."""

import ctypes
import json
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000


def _check(result, what):
  if result != 0:
    errno = ctypes.get_errno()
    raise OSError(errno, f"{what}: {os.strerror(errno)}")


def enter(size_or_folder):
  """This process into its own user namespace (as root there) and mount namespace, with a
  tmpfs of that size, or the folder, on /mnt that no other process sees."""
  libc = ctypes.CDLL(None, use_errno=True)
  uid, gid = os.getuid(), os.getgid()
  _check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
  for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                     ("gid_map", f"0 {gid} 1")):
    with open(f"/proc/self/{name}", "w") as f:
      f.write(text)
  _check(libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
  if os.path.isdir(size_or_folder):
    _check(libc.mount(os.fsencode(size_or_folder), b"/mnt", None, MS_BIND, None), "mount --bind")
  else:
    _check(libc.mount(b"tmpfs", b"/mnt", b"tmpfs", 0, f"size={size_or_folder}".encode()),
           "mount tmpfs")


if __name__ == "__main__":
  enter(sys.argv[1])
  import helpers  # pylint: disable=import-outside-toplevel  (after enter: may start threads)
  helpers.run_in_one_process(sys.argv[2], json.loads(sys.argv[3]))
