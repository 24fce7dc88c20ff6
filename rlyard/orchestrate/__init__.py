"""Orchestration: the sync loop (`sync`), the async loop (`async_loop`, `workers`, `buffer`), rollouts and evaluation."""
