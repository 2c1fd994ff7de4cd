"""What the web tasks (``tasks/web.py``) and the web environments (``envs/web/``) share, below both: the local
sites' seed content and the agent's action language. It imports nothing of ours."""
