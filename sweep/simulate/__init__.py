"""Simulated studies: losses drawn from a stated scaling law instead of training."""
