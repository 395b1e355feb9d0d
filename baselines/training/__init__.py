"""The training core: the trainer, the methods it runs, the loss and advantages, the policies it
trains, and the run folder (config, checkpoints, metrics, saved episodes). It imports no
application (`baselines.apps`) and no command-line module (an import-linter contract)."""
