"""Query planning: the binder (`logical`), the planner (`physical`) and EXPLAIN (`explain`)."""
