"""Agent code, run once per rollout in Agent Lightning's agent processes: kit (the contract and helper
API), template (the one-call agent), toolbox and tool_agent (the bundled tool agent).

Imports the standard library, the root's light modules, runs.run_dir's names and edge.reaper (standard
library: the end of a rollout's process tree) only: every rollout pays for its imports (tests/bundle/test_architecture.py, AGENT_IMPORTS).
"""
