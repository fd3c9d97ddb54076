"""Cells as Ray tasks on a local or remote cluster; the driver stays the only writer of the run folder."""
