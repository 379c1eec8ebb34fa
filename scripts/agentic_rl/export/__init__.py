"""A run's checkpoint out as a proved Hugging Face folder (exporter), and base-vs-trained comparison
(compare).

Imports the root, edge, checks (model files) and runs (the folder); never launch.
"""
