"""Task folders made from what users already have (new_task.py): reasoning-gym's generators (gym_source),
VERL's parquet data (verl_source) and dataset files, JSONL, CSV or parquet (file_source); the folder is
written whole or not at all (folder), with a judge.py copied from assets/judges/ (judges).

Imports the root, edge (reasoning-gym, pyarrow, VERL's scorers) and checks (the judge audit's answer
format, so the oracle a source checks is the one the audit and the rehearsal play). Only the CLI imports it.
"""
