"""Checkpoint files: the released .npz layout (read, write, resolve, fetch) and the orbax
train state a run resumes from."""
