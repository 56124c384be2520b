"""Hugging Face `config.json` -> ModelSpec: typed checks of the file (check.py), RoPE in either layout
transformers writes (rope.py), and the reader (config.py). Owns nothing beyond the model folder's rules.
"""
