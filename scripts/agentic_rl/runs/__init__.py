"""The run folder and what reads it: run_dir is its one owner (every name under it, the training.status
schema, liveness, checkpoints); run_records, metrics_reader, samples, learning_signal, learning_curve,
run_health and run_status read it; run_stop stops a run by proof of identity.

Imports the root and edge only: check_status and stop_training must work on a folder whatever started it.
"""
