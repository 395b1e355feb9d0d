"""SCOPE envs and simulators inside other projects' LLM trainers (TRL's `GRPOTrainer`, ...)."""
