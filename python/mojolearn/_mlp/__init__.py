"""The trainers' machinery: layer sizes, state, the resident session, the per-operation path,
batch intake, the trainer core."""
