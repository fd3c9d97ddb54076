"""One cell of the benchmark: a method's mask on a (task, seed)'s base model, its condition step and its record."""
