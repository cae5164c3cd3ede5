"""Released weights and their formats: the .npz layout (read, write, check), the names and
their Hub mirrors (resolve, fetch), and timm / Hugging Face / big_vision files read and
written as that layout. A run's own orbax train state is training/runs/orbax_checkpoints.py."""
