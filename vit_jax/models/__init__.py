"""Flax modules of ViT and the hybrid ResNet stem, plus the released model zoo."""
