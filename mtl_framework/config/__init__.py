"""What a user writes, read and checked: experiment YAML, task specs and their registry,
the precision a run computes in. Nothing here builds a model or reads a run."""
