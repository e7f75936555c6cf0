"""The summarizers Compact asks: the embedded offline one and the Anthropic Messages API."""
