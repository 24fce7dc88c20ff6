"""Orchestration: the sync loop, rollouts and evaluation."""
