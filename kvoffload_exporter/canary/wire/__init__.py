"""The wire: the OpenAI-compatible client, SSE protocol, response validation and classification, secrets."""
