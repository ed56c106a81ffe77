"""The measurement layer: parallel builds, the isolated child that checks and times a
kernel, the local runner, and the Measurer that drives a runner for the tuner."""
