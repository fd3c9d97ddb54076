"""The run folder on disk: records and their schema, the JSON-lines files, run.json and cached base models."""
