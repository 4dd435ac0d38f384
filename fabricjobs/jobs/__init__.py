"""Running jobs: resolving a NAME to code (registry), the job context, the worker processes."""
