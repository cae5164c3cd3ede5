"""What a run leaves in its workdir and how it is protected: the lock, output files,
metrics writers and progress, preemption."""
