"""The model: a decoder's shape (spec.py: ModelSpec, and what one TP rank holds of it), the presets and
`get_model` (presets.py: a preset name, a Hugging Face config.json or NAME[:K] to a ModelSpec), and the
Hugging Face readers (hf/).

Owns: ModelSpec, RopeSpec, the presets. May import: the sim leaves (bounds, errors) and fileio/; nothing
else of sim (the model is the shared base every other folder reads).
"""
