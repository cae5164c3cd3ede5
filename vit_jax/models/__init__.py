"""What every model family shares: the Transformer encoder and its attention, position
embeddings, the family contract and its registry; each family lives in vit_jax/families/."""
