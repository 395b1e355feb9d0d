"""Training on top of the SCOPE env API: single-simulator RL, VS, co-training, population co-training."""
