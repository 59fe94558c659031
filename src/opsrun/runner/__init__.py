"""The run engine: orchestrates operations around the main LLM call."""
