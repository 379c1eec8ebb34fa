"""The GPU-hour forecast of a run before it is booked (forecast.py, start_training.sh): the model's shape from
its config.json, the task's prompt tokens, the config's plan and a rehearsal's measures, priced phase by phase
on the GPUs' figures (cost.py, gpu_table.json).

Imports the root, edge (the tokenizer, NVML, the agent pool's size), checks (config values, model folders, GPU
selection) and runs (the run folder's names, a rehearsal's samples); nothing imports it but launch and the CLIs.
"""
