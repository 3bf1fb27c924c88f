"""dtorch.optim: optimizers over DTensors."""
