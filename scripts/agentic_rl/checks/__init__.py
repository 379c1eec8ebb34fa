"""The gates before a run: the task folder's data, template, judge and config (task_checks), VERL's rules
(config_checks, config_values, verl_rules), the judge and agent probes, tools.py (agent_rules), the model's
chat template and tool parser (template_checks), the model's files and memory fit, free GPUs and the driver,
placement and a joined cluster's preflight.

Imports the root, edge and agents (tools.py's schemas); never launch, runs or export: a gate reads the
task folder and the machine, not a run.
"""
