"""A dense reward for tests: the share of vowels in the reply, so a random model's samples
differ within a group and every step trains (a 0 / 1 verdict on a random model is all 0)."""


def vowel_share(completions, **kwargs):
    return [sum(ch in "aeiou" for ch in text) / max(1, len(text)) for text in completions]
