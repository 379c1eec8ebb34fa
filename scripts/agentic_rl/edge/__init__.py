"""The only modules that import the outside worlds: nvml (pynvml), procs (psutil and every signal) with
reaper (its standard-library twin: a child subreaper, the end of a process tree; the agents use it), agl
(Agent Lightning), verl_config and verl_merge (Hydra, OmegaConf, VERL), ray_cluster (Ray), hub
(huggingface_hub), mcp_hub (the MCP SDK), torch_build (the installed torch's build), judge_service (an LLM
judge's endpoint, one service per run), gym (reasoning-gym), parquet (pyarrow), verl_scores (VERL's reward
functions, without torch), and cpu/ (the CPU stand-ins inside VERL's trainer). Each imports its library
lazily, inside functions.

Imports nothing of the domain: only the root's cli, files and llm_judge (the judge.json contract the judge
service serves), and other edge modules.
"""
