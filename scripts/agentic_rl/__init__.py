"""agentic_rl: the internals behind scripts/*.py, one folder per concern.

- the root: what every room shares: cli (exit codes, the --json envelope, Error/Hint), untrusted (text
  from models and run files made safe for a terminal and for JSON), files (strict JSON
  in, atomic writes out), bootstrap (the rerun under .venv), task (the task folder's contract),
  oracle_turns (the --oracle file's contract), tool_calls (vLLM's tool-call parsers, standard library) and
  handover (the run's secrets handed to a child through a pipe, never an environment);
- checks/: the gates before a run (task folder, config, judge, agent, model, GPUs, placement, cluster);
- launch/: the run itself, from start_training.sh to the job's end (launcher, job, rehearsal, CPU mode);
- runs/: the run folder (its one owner, run_dir) and everything that reads or stops a run;
- export/: a checkpoint out as a Hugging Face folder, and base-vs-trained comparisons;
- agents/: the code that runs once per rollout;
- edge/: the only modules that import the outside worlds (NVML, processes, Agent Lightning, VERL, Ray).
tests/bundle/test_architecture.py keeps the direction of imports between them (ALLOWED there).
"""
