"""One replica: its own process (``python -m inference_agent.serving.replica``) running one engine of one pool on a
loopback port, with its HTTP routes, its vLLM-named metrics, its request ledger and the key that opens it."""
