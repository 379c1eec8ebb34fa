"""The only modules that import the outside worlds: nvml (pynvml), procs (psutil and every signal) with
reaper (its standard-library twin: a child subreaper, the end of a process tree; the agents use it), agl
(Agent Lightning), verl_config and verl_merge (Hydra, OmegaConf, VERL), ray_cluster (Ray), hub
(huggingface_hub), mcp_hub (the MCP SDK), torch_build (the installed torch's build), chat_template
(transformers' tokenizers and chat templates, vLLM's tool parsers), judge_service (an LLM
judge's endpoint, one service per run), and cpu/ (the CPU stand-ins inside VERL's trainer). Each imports its
library lazily, inside functions.

Imports nothing of the domain: only the root's cli, files, llm_judge (the judge.json contract the judge
service serves), oracle_turns and tool_calls (the --oracle file and vLLM's tool parsers, which the CPU
rollout server plays and answers with), and other edge modules.
"""
