"""What a run measures besides its loss: accuracy on evaluation sets and few-shot probes."""
