"""The OpenAI adapter's internals: request building and error translation."""
