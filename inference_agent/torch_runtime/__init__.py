"""The built-in torch engines a replica runs: the small transformer, its paged KV cache, the batching scheduler, the
byte tokenizer and the image classifier, behind the Protocols of ``api.py``."""
