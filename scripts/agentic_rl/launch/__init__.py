"""The run: the one-process launch behind start_training.sh (launcher), the background job (training_job)
and its config (job_config), the rehearsal, CPU training (cpu_mode, cpu_model), and the learning
self-test (selftest: a run started, waited for, and judged).

Imports the root, edge, agents, checks (the preflight) and runs (the folder it writes); only the CLIs
import it.
"""
