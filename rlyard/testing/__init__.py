"""Tools for testing rlyard itself under failure: fault-injecting environments and kill points."""
