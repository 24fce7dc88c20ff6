"""`rlyard view`: a local web viewer over a run folder's metrics and trajectories, live while it trains."""
