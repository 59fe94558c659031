"""Internals of :mod:`opsrun.providers.anthropic`: message mapping, request shaping and
error translation."""
