"""The optimizers' machinery under `mojolearn.optim`: the argument checks, the hyperparameter
record and binding memory (`base`), the state_dict (`state`), device residency (`resident`)."""
