"""The LLM edit-plan protocol (v1 and v2): parse, validate, patch, apply."""
