"""Applications built on the training core: cross-play evaluation, simulator fidelity, the study
driver, the demo, the GPU memory planner, and the web app for people (`people`)."""
