"""``bench run``: plan a run's cells, fine-tune the base models, and execute the cells into a run folder."""
