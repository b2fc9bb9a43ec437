"""GPU benchmark of the reference solutions against PyTorch baselines."""
