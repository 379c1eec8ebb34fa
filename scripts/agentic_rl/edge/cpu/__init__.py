"""CPU training's stand-ins inside VERL's trainer (start_training.sh --cpu-steps): stand_ins (what a CPU
cannot run, each naming the VERL line it replaces), rollout_server (vLLM's place), batch_engine (its
batching decoder), forced_turns (an --oracle file's turns played as the model's own tokens) and chat_reply
(a chat answer's message as vLLM's tool parser reads it).

Imports edge and the root only.
"""
