"""Orchestration: where every run starts (`entry.train`: mode and backend), the sync loop (`sync_loop`), the async loop (`async_loop`, `workers`, `buffer`), rollouts and evaluation."""
