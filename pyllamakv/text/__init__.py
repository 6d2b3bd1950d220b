"""Text: tokenizers, chat templates and named chat formats."""
