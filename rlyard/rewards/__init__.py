"""Python reward functions (`env.reward`): loading them, scoring batches with them, built-in ones.

`env.reward: "my_pkg.rewards:fn"` or `"path/to/rewards.py:fn"` (or a list, with
`env.reward_weights`) grades a single-turn family's samples, replacing its own verifier; the
`dataset` family (your own prompts from a file) needs one. See docs/your-data.md.
"""
from rlyard.rewards.builtin import (boxed_format, completion_text, exact_match, json_schema, json_valid, math_equal,
                                    regex_match, think_format)
from rlyard.rewards.loading import RewardFunction, RewardLoadError, check_arguments, load_reward_function, load_rewards
from rlyard.rewards.scoring import score_samples, with_rewards

__all__ = ["RewardFunction", "RewardLoadError", "boxed_format", "check_arguments", "completion_text", "exact_match",
           "json_schema", "json_valid", "load_reward_function", "load_rewards", "math_equal", "regex_match",
           "score_samples", "think_format", "with_rewards"]
